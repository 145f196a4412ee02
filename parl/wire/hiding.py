"""Which methods of an actor's class are hidden by attributes of its instance.

In Python an attribute set on an instance (``self.step = 0`` in ``__init__``) hides a method of
its class with the same name (``Actor.step``): ``obj.step`` is then the attribute. A proxy has
the class's methods on its own class, so it must be told which ones the instance hides, to
read those as attributes instead (PARL 2.x does the same). The actor's side sends the names
with a reply whenever they change (message kind ``RESULT_HIDING``).
"""

from __future__ import annotations

import inspect
from typing import Any


class HiddenMethods:
    """Tracks the names of ``instance``'s class methods that its ``__dict__`` hides."""

    __slots__ = ("_instance", "_methods", "_size", "_unsent", "names")

    def __init__(self, instance: Any) -> None:
        self._instance = instance
        self._methods = method_names(type(instance))
        self._size = -1
        self._unsent = False
        self.names: frozenset[str] = frozenset()

    def changed(self) -> bool:
        """Whether ``names`` changed since it was last sent (it is then up to date); a True
        answer counts as sent, unless :meth:`not_sent` follows.

        Only a change of the instance's number of attributes is looked into, which keeps a
        call cheap: a method hidden by a new attribute (or shown again by a deleted one)
        changes it. A method deleting one attribute and adding another of a method's name
        in the same call is seen at the next change."""
        attributes = getattr(self._instance, "__dict__", None)
        if attributes is not None and self._methods and len(attributes) != self._size:
            self._size = len(attributes)
            names = frozenset(attributes.keys() & self._methods)
            if names != self.names:
                self.names, self._unsent = names, True
        unsent, self._unsent = self._unsent, False
        return unsent

    def not_sent(self) -> None:
        """The reply that carried ``names`` could not be sent: carry them with the next one."""
        self._unsent = True


def method_names(cls: type) -> frozenset[str]:
    """The names of ``cls``'s methods that a proxy calls remotely (what
    ``parl.remote.methods.proxy_methods`` puts on the proxy class, special methods aside:
    Python looks those up on the class, never on the instance)."""
    names = set()
    for name in dir(cls):
        if name.startswith("__"):
            continue
        static = inspect.getattr_static(cls, name, None)
        if isinstance(static, property) or inspect.isclass(static):
            continue
        if callable(static) or isinstance(static, (staticmethod, classmethod)):
            names.add(name)
    return frozenset(names)
