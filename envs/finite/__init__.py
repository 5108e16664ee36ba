"""The finite worlds: small text MDPs with known dynamics (``craft``, TextCraft-like; ``rooms``, ALFWorld-like),
enumerated into arrays (``mdp``) and played behind the ``TextEnv`` contract as ``FiniteCraft-v0`` and
``FiniteRooms-v0`` (``textenv``). Their exact values, the benchmark and the live probe are ``groundtruth``'s."""
