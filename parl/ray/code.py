"""Shipping code to Ray workers: the cluster's packer, delivered through Ray's ``runtime_env``.

The project (the entry script's folder, filtered and size-capped, plus ``distributed_files``)
and this ``parl`` package are packed by :mod:`parl.deploy.packer`, exactly as for a cluster,
and the same gzip tar archives are stored in Ray's GCS under content-named URIs
(``gcs://_ray_pkg_<digest>.tar.gz``). Each actor's ``runtime_env`` names them:
``working_dir`` (workers run in the project folder, which is on ``sys.path``) and
``py_modules`` (this ``parl``). Ray unpacks each archive once per node and URI.

Why not let Ray pack a local folder itself: Ray accepts local paths only in the job's
``runtime_env`` (``ray.init``), not in an actor's, and it would apply its own ignore rules
(``.rayignore``, its default excludes) on top of ours, so that a data file given in
``distributed_files`` could silently be left out. Storing our own archive keeps the
deployment rules identical to the cluster's (``.gitignore`` as git reads it, credentials left
out, ``distributed_files`` shipped on purpose); it uses Ray's packaging helpers
(``ray._private.runtime_env.packaging``), pinned by ``ray>=2.60`` and covered by the tests.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parl.deploy.packer import Pack, outside_modules, pack_parl, pack_project, project_root
from parl.errors import DeploymentError
from parl.wire import classes

log = logging.getLogger("parl.ray")


class CodeShipper:
    """The ``runtime_env`` of this caller's actors, and the modules that travel by value."""

    def __init__(self, distributed_files: Sequence[str] = ()) -> None:
        self.root: Path = project_root()
        self._packs: list[Pack] = [pack_project(self.root, distributed_files), pack_parl()]
        self._uris = [f"gcs://_ray_pkg_{pack.digest[:40]}.tar.gz" for pack in self._packs]
        self._lock = threading.Lock()
        self._modules_seen: set[str] = set()

    def runtime_env(self) -> dict[str, Any]:
        """The actors' ``runtime_env``; stores an archive Ray lacks (first use, or one that
        Ray dropped after its actors ended: it keeps unused packages only for a while)."""
        from ray._private.runtime_env.packaging import package_exists, upload_package_to_gcs

        with self._lock:
            for pack, uri in zip(self._packs, self._uris, strict=True):
                if package_exists(uri):
                    continue
                log.debug("storing %r in Ray as %s", pack, uri)
                try:
                    upload_package_to_gcs(uri, pack.data)
                except Exception as exc:  # noqa: BLE001 - Ray raises several kinds
                    raise DeploymentError(
                        f"storing this project's code in Ray ({pack.files} files, "
                        f"{len(pack.data)} bytes compressed) failed: {exc}"
                    ) from None
            self._outside_by_value()
        return {"working_dir": self._uris[0], "py_modules": [self._uris[1]]}

    def _outside_by_value(self) -> None:
        """Modules imported from outside the project folder (and not installed) are not on
        the workers: what is defined there travels by value, in Ray's pickler as in ours."""
        import ray.cloudpickle

        new = set(sys.modules.copy()) - self._modules_seen
        if not new:
            return
        for name in outside_modules(self.root, sorted(new)):
            module = sys.modules.get(name)
            if module is None:
                continue
            classes.send_by_value(name)
            try:
                ray.cloudpickle.register_pickle_by_value(module)
            except ValueError:  # not a registrable module (e.g. a module without a name)
                pass
        self._modules_seen |= new
