"""WebShop (Yao et al., 2022) as a text environment, its official data format and a catalogue generator.

``WebShopEnv`` follows the environment contract of ``envs.base.TextEnv`` (see envs/webshop/README.md).
"""
from .config import RewardConfig, WebShopConfig
from .data import Catalogue, DataFilesError, Goal, Product, clear_catalogue_cache, load_catalogue
from .env import WebShopEnv
from .reward import ScoreBreakdown, score_purchase

__all__ = [
    "WebShopEnv",
    "WebShopConfig",
    "RewardConfig",
    "Catalogue",
    "Goal",
    "Product",
    "DataFilesError",
    "load_catalogue",
    "clear_catalogue_cache",
    "score_purchase",
    "ScoreBreakdown",
]
