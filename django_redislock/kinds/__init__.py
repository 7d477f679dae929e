"""Lock kinds: what a kind of lock keeps in Redis and the operations on it.

A kind builds each of its operations as a value (:class:`Operation`: script,
keys, args, reply parser); a transport (:mod:`django_redislock.transports`)
decides how it reaches Redis.
"""

from .holders import Holders, HolderState
from .mutex import Busy, Granted, Mutex
from .operation import Operation
from .options import KindOptions

__all__ = ["Busy", "Granted", "HolderState", "Holders", "KindOptions", "Mutex", "Operation"]
