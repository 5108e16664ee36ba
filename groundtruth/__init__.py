"""Ground-truth advantage benchmark: finite text MDPs with known values, and estimators measured against them."""
