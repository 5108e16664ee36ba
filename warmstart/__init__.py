"""The SFT warm start RL starts from: behaviour cloning on expert episodes, then DAgger rounds, cached by settings.

* ``warmstart.config``: its settings (``WarmStartConfig``), the cache key they make, and the check of a run config's
  ``sft.warmstart`` section (``from_run_config``);
* ``warmstart.sft``: expert rows, their encoding, the SFT engine and loop, playing and evaluating the model;
* ``warmstart.recipe``: the cached pipeline (``warm_start``), command line ``python -m experiments.warmstart``.

One layer above ``trainer`` (it trains with the trainer's actor engine and the agents' rollout); ``trainer`` does not
import it.
"""
