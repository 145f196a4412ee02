"""The import name of SMAC (StarCraft II micromanagement), whose ``StarCraft2Env`` PARL's QMIX
and COMA scripts play; here a level-based foraging game in SMAC's interface."""
