"""Deployment: getting the caller's code to the hosts that run its actors.

Every carrier that runs actors on other machines ships code the same way: the caller's project
folder and this ``parl`` package are packed into deterministic archives named by their digest
(:mod:`parl.deploy.packer`, filtered by :mod:`parl.deploy.ignore`); a host keeps them in a
private cache (:mod:`parl.deploy.cachedir`), checks a cached folder against its name before
using it (:mod:`parl.deploy.codecheck`), and makes each caller a job folder of its own from it
without copying large files (:mod:`parl.deploy.cache`, :mod:`parl.deploy.linking`). The
versions that must match between a caller and a host are :mod:`parl.deploy.versions`.

How the archives travel is the carrier's: a cluster uploads them to its host agents
(:mod:`parl.cluster.upload`), the SSH launcher copies them over SFTP, Ray ships them in a
runtime environment.
"""
