"""Clusters over TCP: a master, host agents that own CPU slots, and the carrier that places
actors on them (``parl.connect("host:port")``, ``xparl start``). See :mod:`parl.cluster.cli`."""
