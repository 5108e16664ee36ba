"""The config checks every config class shares: ``ConfigError`` and one function per kind of check. Their one home is
``estimators.config_checks`` (the installed estimators carry them and import nothing outside their package); this
module re-exports them, so the run config, the warm start and the environments import them from ``common``."""
from estimators.config_checks import (
    ConfigError,
    check_choices,
    check_number,
    choice_message,
    fail,
    is_choice,
    literal_choices,
)

__all__ = ["ConfigError", "fail", "check_number", "check_choices", "choice_message", "is_choice", "literal_choices"]
