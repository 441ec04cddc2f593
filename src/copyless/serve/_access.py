"""Who sent a request, and what it may open: the server's security model for client shared
memory and its restricted APIs.

A system shared-memory region is an object of ``/dev/shm`` that the *client* created and the
*server* opens by name. The server may be able to open objects its client could not (another
user's, when it runs as root or as a shared service account), so a registration is checked
against the client, never against the server alone:

* where the server can tell the client's user (a Unix-socket connection: ``SO_PEERCRED``; a
  TCP connection from this host: the kernel's own record of the client's socket, asked by its
  address through sock_diag, as ``ss -e`` reads it), the object
  is opened only if that user's permission bits allow reading and writing it;
* client shared memory is off for TCP clients unless the server runs with
  ``--allow-client-shm`` (Triton's 2026 default), or the request carries the key of a
  restricted ``shared-memory`` API (below); a Unix-socket listener allows it (the socket file
  is created ``0600``: only the server's user, or root, can connect);
* every failure to open an object is the same message, whether the object is missing, not a
  regular file, or not the client's to open: no error tells one user of another's objects;
* a region belongs to the client that registered it (its user, where the server can tell):
  status lists, inference uses and unregister removes only the client's own.

Restricted APIs follow Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol``:
``API[,API...]:KEY=VALUE`` makes those endpoints answer only requests carrying header (gRPC:
metadata) ``KEY: VALUE``; others get 403 / PERMISSION_DENIED naming the header expected.
"""

from __future__ import annotations

import grp
import hmac
import ipaddress
import os
import pwd
import socket
import stat
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..types import OptionError
from ._errors import Refusal, RequestError

__all__ = [
    "API_CATEGORIES",
    "UNIDENTIFIED",
    "Client",
    "Restriction",
    "Restrictions",
    "check_object",
    "check_shm",
    "may_open",
    "parse_restriction",
    "tcp_peer_uid",
    "unix_peer",
    "unix_socket_client",
]

#: The API groups a restriction can name (Triton's).
API_CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config",
                  "model-repository", "statistics")  # fmt: skip


class Client:
    """A request's sender as far as the server can tell.

    ``transport``: ``"tcp"``, ``"unix"`` or ``"asgi"`` (an app mounted in another server, such
    as a Ray Serve replica: it cannot tell). ``uid``/``gid``: the sender's user and group, None
    where the server cannot tell (another host, another network namespace); ``locate`` finds
    them the first time they are asked for (the socket-table lookup costs a read of
    ``/proc``: only shared-memory calls need it). ``keys``: the restricted API groups whose
    key the request carried.
    """

    __slots__ = ("_ids", "_locate", "keys", "transport")

    def __init__(self, transport: str, uid: int | None = None, gid: int | None = None,
                 keys: Iterable[str] = (),
                 locate: Callable[[], tuple[int | None, int | None]] | None = None) -> None:
        self.transport = transport
        self.keys = frozenset(keys)
        self._ids = (uid, gid)
        self._locate = locate

    def _found(self) -> tuple[int | None, int | None]:
        if self._locate is not None:
            self._ids, self._locate = self._locate(), None
        return self._ids

    @property
    def uid(self) -> int | None:
        return self._found()[0]

    @property
    def gid(self) -> int | None:
        return self._found()[1]

    @property
    def owner(self) -> str:
        """The owner tag of the regions this client registers."""
        uid = self.uid
        return f"uid {uid}" if uid is not None else f"unidentified {self.transport}"

    def with_keys(self, keys: Iterable[str]) -> Client:
        client = Client(self.transport, keys=keys)
        client._ids, client._locate = self._ids, self._locate
        return client

    def __repr__(self) -> str:
        return f"Client({self.transport!r}, keys={sorted(self.keys)})"


UNIDENTIFIED = Client("asgi")


def unix_peer(sock: socket.socket) -> tuple[int, int, int] | None:
    """``(pid, uid, gid)`` of a Unix-socket peer (``SO_PEERCRED``), None if unavailable."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_HEADER = struct.Struct("=IHHII")
_NO_COOKIE = 0xFFFFFFFF
#: inet_diag_msg: family, state, timer, retrans (4 bytes), inet_diag_sockid (48 bytes), then
#: expires, rqueue, wqueue, uid, inode
_UID_AT = _NLMSG_HEADER.size + 4 + 48 + 12


def _diag_uid(family: int, src: str, sport: int, dst: str, dport: int) -> int | None:
    """The owner of the TCP socket ``src:sport -> dst:dport`` of ``family``, asked of the
    kernel by its exact address (sock_diag: what ``ss -e`` reads), None if there is none."""
    def packed(host: str) -> bytes:
        return socket.inet_pton(family, host).ljust(16, b"\0")

    sockid = struct.pack("!HH", sport, dport) + packed(src) + packed(dst) \
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)  # fmt: skip
    body = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    header = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY,
                                _NLM_F_REQUEST, 1, 0)  # fmt: skip
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(1.0)
        link.sendto(header + body, (0, 0))
        answer = link.recv(8192)
    if len(answer) < _UID_AT + 4 or _NLMSG_HEADER.unpack_from(answer)[1] != _SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR: no such socket
    return int(struct.unpack_from("=I", answer, _UID_AT)[0])


def _forms(host: str) -> list[tuple[int, str]]:
    """``(family, address)`` a host's socket may have: IPv4 also as IPv4-mapped IPv6."""
    address = ipaddress.ip_address(host.split("%")[0])
    if isinstance(address, ipaddress.IPv4Address):
        return [(socket.AF_INET, str(address)), (socket.AF_INET6, f"::ffff:{address}")]
    if address.ipv4_mapped is not None:
        return [(socket.AF_INET, str(address.ipv4_mapped)), (socket.AF_INET6, str(address))]
    return [(socket.AF_INET6, str(address))]


def tcp_peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The user owning the *client's* end of the TCP connection ``peer -> local``, where that
    end is a socket of this host in this network namespace; None elsewhere. The client's
    socket is the one whose local address is ``peer`` and remote address ``local``. Where
    ``local`` is a wildcard or a name, the client connected to an address the server does
    not know: its own (a client of this host on the host's address) and loopback are
    tried."""
    try:
        clients = _forms(peer[0])
        try:
            wildcard = ipaddress.ip_address(local[0].split("%")[0]).is_unspecified
        except ValueError:
            wildcard = True
        targets = [peer[0], "127.0.0.1", "::1"] if wildcard else [local[0]]
        for family, src in clients:
            for target in targets:
                for dst_family, dst in _forms(target):
                    if dst_family == family:
                        uid = _diag_uid(family, src, peer[1], dst, local[1])
                        if uid is not None:
                            return uid
    except (OSError, ValueError):
        return None
    return None


def _groups(uid: int, gid: int | None) -> set[int]:
    groups = {gid} if gid is not None else set()
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return groups
    groups.add(entry.pw_gid)
    try:
        groups.update(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups.update(g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem)
    return groups


def may_open(info: os.stat_result, uid: int, gid: int | None = None) -> bool:
    """Whether user ``uid`` (primary group ``gid``) may open a file of ``info`` for reading
    and writing, by its permission bits (root may; ACLs granting more are not consulted, so
    the answer errs towards no)."""
    if uid == 0:
        return True
    mode = info.st_mode
    if info.st_uid == uid:
        return mode & 0o600 == 0o600
    if info.st_gid in _groups(uid, gid):
        return mode & 0o060 == 0o060
    return mode & 0o006 == 0o006


@dataclass(frozen=True, slots=True)
class Restriction:
    """API groups answered only to requests carrying ``header: value``."""

    categories: frozenset[str]
    header: str
    value: str

    def granted(self, headers: Mapping[str, str]) -> bool:
        given = headers.get(self.header)
        return given is not None and hmac.compare_digest(given.encode(), self.value.encode())


def parse_restriction(text: str) -> Restriction:
    """``API[,API...]:KEY=VALUE`` (Triton's form); raises :class:`OptionError`."""
    apis, sep, pair = text.partition(":")
    key, eq, value = pair.partition("=")
    categories = frozenset(a.strip() for a in apis.split(",") if a.strip())
    if not sep or not eq or not key.strip() or not value or not categories:
        raise OptionError(f"{text!r} is not API[,API...]:KEY=VALUE")
    unknown = sorted(categories - set(API_CATEGORIES))
    if unknown:
        raise OptionError(f"{text!r}: unknown API {', '.join(unknown)}; the APIs are "
                          f"{', '.join(API_CATEGORIES)}")  # fmt: skip
    header = key.strip().lower()
    if not all(c.isascii() and (c.isalnum() or c in "-_") for c in header):
        raise OptionError(f"{text!r}: the header name {key!r} must be letters, digits, - or _")
    return Restriction(categories, header, value)


class Restrictions:
    """One protocol's restricted API groups: which key guards which group."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        self._by_category: dict[str, Restriction] = {}
        for restriction in restrictions:
            for category in restriction.categories:
                if category in self._by_category:
                    raise OptionError(f"API {category!r} is restricted twice for one protocol")
                self._by_category[category] = restriction

    def check(self, category: str, headers: Mapping[str, str]) -> frozenset[str]:
        """Refuse (403 / PERMISSION_DENIED) a request to a restricted group without its key;
        else the groups whose keys the request carries (an inference naming a region needs
        the shared-memory key beside its own)."""
        restriction = self._by_category.get(category)
        if restriction is not None and not restriction.granted(headers):
            raise RequestError(Refusal.FORBIDDEN, f"This API is restricted, expecting "
                               f"header '{restriction.header}'")  # fmt: skip
        return frozenset(c for c, r in self._by_category.items() if r.granted(headers))


def unix_socket_client(path: str) -> Client:
    """A client of a Unix socket whose peer cannot be asked (gRPC's): the server's own user
    while the socket file is the server's and ``0600`` (nobody else can connect), else
    unidentified (the TCP rules apply)."""
    try:
        info = os.lstat(path)
    except OSError:
        return Client("unix-shared")
    if stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid() \
            and stat.S_IMODE(info.st_mode) & 0o077 == 0:  # fmt: skip
        return Client("unix", os.geteuid(), os.getegid())
    return Client("unix-shared")


def check_shm(client: Client, allow_client_shm: bool) -> None:
    """Refuse client shared memory to a client the rules above do not allow it (a Unix
    socket's client is always identified: its own user, or the server's)."""
    if client.transport == "unix" or allow_client_shm or "shared-memory" in client.keys:
        return
    raise RequestError(
        Refusal.FORBIDDEN,
        "client shared memory is off for this connection: start copyless-serve with "
        "--allow-client-shm, connect through its Unix socket (--grpc unix:PATH or "
        "--http unix:PATH), or send the key of a restricted shared-memory API "
        "(docs/serve.md, 'Security')",
    )


def check_object(fd: int, client: Client) -> os.stat_result | None:
    """The object open at ``fd`` if it is a regular file ``client`` may open itself (where
    the server can tell its user), else None."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return None
    if client.uid is not None and not may_open(info, client.uid, client.gid):
        return None
    return info
