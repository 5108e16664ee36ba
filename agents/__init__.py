"""How a model sees an environment and acts in it: prompts, projection, models, engines, rollouts."""
