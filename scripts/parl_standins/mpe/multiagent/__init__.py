"""The import name of the MAPPO authors' particle envs (``multiagent-particle-envs``), on
``parl.env.MAenv``: what PARL's MAPPO script imports, and nothing more."""
