"""The Hugging Face Hub as a kernel hub, through ``huggingface_hub``.

Repositories are Hub repositories of type ``kernel`` with the same layout as the local
hub: builds on branch ``v<version>`` under ``build/<variant>/``, signatures at
``build/<variant>.sig``, the card on the version branch and on ``main``, and
``kernel-status.toml`` on ``main``. Only the
chosen variant is downloaded, into the :class:`~kernelforge.cache.DownloadCache`,
which also keeps the refs and file listings seen online so that ``HF_HUB_OFFLINE=1``
loads work from the cache alone. The token is the one ``huggingface_hub`` finds (``hf
auth login``, ``HF_TOKEN``) unless one is given.

The ``api`` argument takes any object with the few ``HfApi`` methods used here
(``list_repo_refs``, ``list_repo_tree``, ``repo_info``, ``hf_hub_download``,
``create_repo``, ``create_branch``, ``delete_branch``, ``create_commit``); tests pass a
fake one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelforge._paths import refuse_empty_path
from kernelforge.cache import (
    EMPTY_CACHE_GIVE,
    WRITE_ERRNOS,
    DownloadCache,
    is_revision_path,
    make_dirs,
)
from kernelforge.errors import HubError, IntegrityError, NotCachedError
from kernelforge.hub.base import (
    CARD_BRANCH,
    PREFIX_RE,
    STATUS_FILE,
    Fetched,
    Hub,
    Revision,
    Same,
    check_publish_arguments,
    check_small_file,
    is_commit,
    signature_path,
    validate_repo_id,
)

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.hub._staging import Staged
    from kernelforge.signing import SigningKey

__all__ = ["HfHub", "hf_offline", "refs_listed_once", "used_for"]

logger = logging.getLogger(__name__)

REPO_TYPE = "kernel"
#: What kernelforge's ``hf`` extra installs, named by the error where it is missing: the
#: package itself, since pip, given the extra by kernelforge's name, would fetch the
#: project of that name on PyPI, another one, wherever this kernelforge is not installed
#: (run from its sources).
HF_REQUIREMENT = "huggingface_hub>=1.10"
_TRUE = {"1", "ON", "YES", "TRUE"}
_BYTECODE = (".pyc",)
_HEX = re.compile(r"[0-9a-f]+")


def _offline_variable() -> str:
    """The variable that sets offline mode as ``huggingface_hub`` reads them:
    ``HF_HUB_OFFLINE`` or, when that is unset or empty, ``TRANSFORMERS_OFFLINE``."""
    return "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"


def hf_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or, unset, ``TRANSFORMERS_OFFLINE``, as for
    ``huggingface_hub`` and Hugging Face's ``kernels``) asks for offline mode, read now,
    not at import."""
    return os.environ.get(_offline_variable(), "").strip().upper() in _TRUE


def _client_offline() -> bool:
    """Whether ``huggingface_hub`` itself is in offline mode, which it reads once, when
    it is imported: then every request it would make fails."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - a fake api without huggingface_hub
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _wanted(path: str) -> bool:
    return not path.endswith(_BYTECODE) and "__pycache__" not in path.split("/")


# Top-level modules whose exceptions mean the request did not get an answer: the HTTP
# clients huggingface_hub has used (httpx, requests) and their successors (httpx2, ...).
_TRANSPORT_MODULE = re.compile(r"(httpx|httpcore|requests|urllib3|aiohttp)\d*")


def _is_transport_error(err: BaseException, http_error: Any) -> bool:
    """Whether ``err`` is a network failure rather than a bug: an ``OSError`` (the
    builtin connection and timeout errors among them), ``huggingface_hub``'s own
    ``HTTPError``, or any error class defined by an HTTP client module."""
    if isinstance(err, OSError):
        return True
    if isinstance(http_error, type) and isinstance(err, http_error):
        return True
    return any(_TRANSPORT_MODULE.fullmatch(cls.__module__.split(".")[0])
               for cls in type(err).__mro__)


#: The waits, in seconds, between the tries of a read that ``huggingface_hub`` makes only
#: once (the refs listing, a revision's lookup) and that meets a transient failure: as
#: ``huggingface_hub`` spaces the tries of the reads it retries itself (a file listing, a
#: download), so that every read rides out the same outage, 23 s in all.
_RETRY_WAITS = (1.0, 2.0, 4.0, 8.0, 8.0)
#: The longest ``Retry-After`` a retry waits for; the Hub asking for longer ends the tries.
_MAX_RETRY_AFTER = 60.0
#: HTTP answers that say "not now" rather than "no": a timeout, a rate limit, a Hub error.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Errors of the HTTP clients (by class name, as for :data:`_TRANSPORT_MODULE`) raised when
#: an established connection timed out or was cut off.
_TRANSIENT_TRANSPORT = frozenset({"TimeoutException", "Timeout", "ReadError", "WriteError",
                                  "RemoteProtocolError", "ChunkedEncodingError"})
_sleep = time.sleep  # how a retry waits (tests do not)


def _first_line(err: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _raised_by_client(err: BaseException) -> bool:
    """Whether ``err`` was raised inside ``huggingface_hub`` or its storage client
    ``hf_xet``, rather than passing through them: a failed upload of a commit's large
    files comes as a plain ``RuntimeError`` (the HTTP error, if any, as its cause), which
    would otherwise pass for a bug."""
    tb = err.__traceback__
    module = None
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__")
        tb = tb.tb_next
    return isinstance(module, str) and module.split(".")[0] in ("huggingface_hub", "hf_xet")


def _retry_after(err: BaseException) -> float | None:
    """The seconds a ``Retry-After`` header of the error's answer asks to wait, if any."""
    headers = getattr(getattr(err, "response", None), "headers", None) or {}
    try:
        value = float(headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _retry_wait(err: BaseException, backoff: float) -> float | None:
    """How long to wait before trying a read that failed with ``err`` again, or ``None``
    when trying again will not help: an answer that is not transient, a connection that
    could not be made (no network: that fails at once, with the advice to work offline),
    or a ``Retry-After`` beyond :data:`_MAX_RETRY_AFTER`."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(status, int):
        if status not in _TRANSIENT_STATUS:
            return None
        after = _retry_after(err)
        if after is None:
            return backoff
        return after if after <= _MAX_RETRY_AFTER else None
    if isinstance(err, (TimeoutError, ConnectionResetError, ConnectionAbortedError)):
        return backoff
    clients = [cls.__name__ for cls in type(err).__mro__
               if _TRANSPORT_MODULE.fullmatch(cls.__module__.split(".")[0])]
    if not clients or clients[0].startswith("Connect"):  # ConnectError, ConnectTimeout
        return None
    return backoff if _TRANSIENT_TRANSPORT.intersection(clients) else None


def _answer_lost(err: BaseException) -> bool:
    """Whether a write that failed with ``err`` may have been done all the same, its
    answer lost: the Hub answered 5xx (a gateway may give up on a commit that the Hub
    goes on to make), or the request timed out or its connection was cut off once made.
    A refusal (4xx, a rate limit among them) and a connection that could not be made
    did nothing."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(status, int):
        return status >= 500
    return _retry_wait(err, 0.0) is not None


@dataclasses.dataclass(frozen=True)
class _Landed:
    """What a commit whose answer was lost is taken to have answered, once its branch's
    head is found to be it: ``oid``, the commit, as ``CommitInfo.oid`` names it."""

    oid: str


class _AnswerLost:
    """A :meth:`HfHub._call` ``landed`` hook for a write that may be tried again whatever
    became of a try whose answer was lost (creating a repository or a branch): it notes
    that one was, so that a later try's "exists already" (409) is known to be, perhaps,
    this publish's own doing."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, err: Exception, tried: str) -> None:
        self.seen = True


def _holds(entry: tuple[str, str | None], data: bytes) -> bool:
    """Whether a file the Hub lists as ``entry`` (its git blob id and, for a large file,
    the sha256 of its contents) holds ``data``."""
    blob, lfs_sha256 = entry
    if lfs_sha256 is not None:
        return lfs_sha256 == hashlib.sha256(data).hexdigest()
    return blob == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


_OFFLINE_ADVICE = "check the network, or set HF_HUB_OFFLINE=1 to use the download cache"
#: For a write, which the download cache cannot stand in for.
_WRITE_ADVICE = "check the network and try again"
#: For an upload of a large file that the storage refused (401, 403): the Hub accepted the
#: token when it handed out the upload's signed address, so a write token is not what is
#: missing; the address may have expired during a long upload.
_STORAGE_REFUSED = ("the Hub's storage refused the upload the Hub had allowed (its signed "
                    "upload address may have expired): run the same publish again")
#: For a download (``kernelforge download``), which fills the download cache: offline
#: mode cannot help it.
_DOWNLOAD_ADVICE = ("check the network and run the download again (the variants it "
                    "finished are kept in the download cache and are not fetched again; "
                    "the one it was fetching starts over)")
#: For ``kernelforge lock`` offline, when the download cache lacks what it needs.
_LOCK_OFFLINE_ADVICE = ("run 'kernelforge lock' while online (offline, it locks only "
                        "revisions the download cache knows: those of kernels loaded with "
                        "get_kernel while online)")

#: What the Hugging Face Hub is used for in this context, which decides what its errors
#: advise: ``"load"``, ``"lock"`` (:func:`kernelforge.lock.lock_project`) or
#: ``"download"`` (:func:`kernelforge.lock.download_locked`); see :func:`used_for`.
_purpose: ContextVar[str] = ContextVar("kernelforge_hf_purpose", default="load")


@contextlib.contextmanager
def used_for(purpose: str) -> Iterator[None]:
    """Within the block (this thread or task), word the errors of every :class:`HfHub`
    for ``purpose``: ``"lock"`` or ``"download"`` (``"load"`` is the default).

    Args:
        purpose: what the calls in the block do.
    """
    token = _purpose.set(purpose)
    try:
        yield
    finally:
        _purpose.reset(token)


#: The refs each :class:`HfHub` listed on the Hub within the current
#: :func:`refs_listed_once` block, by hub and repository; ``None`` outside one.
_listed_refs: ContextVar[dict[tuple[Same, str], tuple[dict[str, str], dict[str, str]]] | None] = (
    ContextVar("kernelforge_hf_listed_refs", default=None))


@contextlib.contextmanager
def refs_listed_once() -> Iterator[None]:
    """Within the block (this thread or task), an :class:`HfHub` lists a repository's
    refs on the Hub once and answers the block's later reads of them from that listing:
    one operation (choosing the revision of a load, of a lock entry) asks for them
    several times. Nothing is kept past the block; a nested block shares the outer one's
    listings, and a publish always lists the refs anew."""
    if _listed_refs.get() is not None:
        yield
        return
    token = _listed_refs.set({})
    try:
        yield
    finally:
        _listed_refs.reset(token)


#: How many download clients with a ``user_agent`` of its own one :class:`HfHub` keeps.
_AGENT_CLIENTS = 8
#: Of how many commits one :class:`HfHub` keeps the file sizes its listings gave.
_LISTED_SIZES = 16

#: The ``user_agent`` that downloads from the Hugging Face Hub send in this context, as
#: ``get_kernel(user_agent=...)`` gives it (see :func:`sent_as`).
_user_agent: ContextVar[str | dict[str, Any] | None] = ContextVar(
    "kernelforge_hf_user_agent", default=None)


def check_user_agent(user_agent: object) -> None:
    """Refuse what ``huggingface_hub`` cannot send as a user agent.

    Args:
        user_agent: ``None``, a string, or a dict of string keys (each sent as
            ``key/value``).

    Raises:
        TypeError: anything else, naming the argument and what it got.
    """
    if user_agent is None or isinstance(user_agent, str):
        return
    if isinstance(user_agent, dict) and all(isinstance(k, str) for k in user_agent):
        return
    raise TypeError(f"user_agent must be a string, a dict with string keys or None, "
                    f"not {type(user_agent).__name__} ({user_agent!r:.80})")


@contextlib.contextmanager
def sent_as(user_agent: str | dict[str, Any] | None) -> Iterator[None]:
    """Within the block (this thread or task), downloads from the Hugging Face Hub send
    ``user_agent`` besides kernelforge's own name and version (``None``: no change),
    unless ``HF_HUB_DISABLE_TELEMETRY`` is set.

    Args:
        user_agent: as ``huggingface_hub.hf_hub_download`` takes it.
    """
    check_user_agent(user_agent)
    if user_agent is None:  # a kernel-depends load inside get_kernel keeps the caller's
        yield
        return
    token = _user_agent.set(user_agent)
    try:
        yield
    finally:
        _user_agent.reset(token)


#: What the Hub says (``X-Error-Message``) of a token it does not accept.
_BAD_TOKEN = "Invalid credentials in Authorization header"


def _error_message(response: Any) -> str | None:
    """The ``X-Error-Message`` header of an answer from the Hub, if any."""
    headers = getattr(response, "headers", None)
    try:
        value = headers.get("X-Error-Message") if headers is not None else None
    except (AttributeError, TypeError):
        return None
    return value if isinstance(value, str) else None


#: Why no token was sent with a request, as :meth:`HfHub._no_token` finds it.
_NO_LOGIN = "no Hugging Face token was found (HF_TOKEN is not set and 'hf auth login' was not run)"
_IMPLICIT_OFF = ("no token was sent: HF_HUB_DISABLE_IMPLICIT_TOKEN is set, so neither HF_TOKEN "
                 "nor the login of 'hf auth login' is used")
_NO_TOKEN_GIVEN = "no token was sent: this HfHub's client was made with token=False"


def _refused_write(err: BaseException) -> bool:
    """Whether the Hub refused a request for want of rights (401, 403), other than for a
    token it does not accept."""
    response = getattr(err, "response", None)
    return (getattr(response, "status_code", None) in (401, 403)
            and _error_message(response) != _BAD_TOKEN)


def _http_advice(err: BaseException, writing: bool = False, no_token: str | None = None
                 ) -> str:
    """What to do about an HTTP error answer from the Hub, by its status code; a
    write (``writing``) or a download (:func:`used_for`) is not pointed to the download
    cache. ``no_token``: why the refused write carried no token, which is then the fix,
    rather than a token with more rights."""
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    downloading = _purpose.get() == "download"
    if status == 401 and _error_message(response) == _BAD_TOKEN:
        return ("the Hub refused the token sent (invalid, expired or revoked): log in again "
                "with 'hf auth login' or pass a valid token= (an HF_TOKEN set in the "
                "environment is used before the login)")
    if status in (401, 403) and writing and no_token == _IMPLICIT_OFF:
        return (f"{no_token}, and publishing needs a token with write access to the "
                "repository: pass one as token=, or unset HF_HUB_DISABLE_IMPLICIT_TOKEN")
    if status in (401, 403) and writing and no_token == _NO_TOKEN_GIVEN:
        # huggingface_hub sends no token at all then: a login or HF_TOKEN would not help
        return (f"{no_token}, and publishing needs a token with write access to the "
                "repository: make the client with one (HfApi(token=...)), not token=False")
    if status in (401, 403) and writing and no_token is not None:
        return (f"{no_token}, and publishing needs a token with write access to the "
                "repository: log in with 'hf auth login' with a write token, set HF_TOKEN "
                "to one, or pass one as token=")
    if status in (401, 403) and writing:
        return ("publishing needs a token with write access to the repository (a read-only "
                "token loads but cannot publish): log in with 'hf auth login' with a write "
                "token, or pass one as token= (HF_TOKEN, when set, is used before the login)")
    if status in (401, 403):
        return "log in with 'hf auth login' or pass token=, with access to this repository"
    if status in (409, 412):
        return "the branch moved while this ran (another publish to it?): try again"
    if status == 400:
        return "the Hub refused the request as invalid (its reason is above)"
    if status == 429 or (isinstance(status, int) and status >= 500):
        after = _retry_after(err)
        return "the Hub is busy or down: try again later" + (
            f" (it asks to wait {after:.0f} s)" if after else "") + (
            "" if writing or downloading
            else ", or set HF_HUB_OFFLINE=1 to use the download cache")
    return _network_advice(writing)


def _network_advice(writing: bool = False) -> str:
    """What to do when the Hub could not be reached: for a write, try again; for a
    download (:func:`used_for`), try again (the cache keeps what was fetched); else,
    use the download cache."""
    if writing:
        return _WRITE_ADVICE
    return _DOWNLOAD_ADVICE if _purpose.get() == "download" else _OFFLINE_ADVICE



def _huggingface_hub() -> Any:
    """The ``huggingface_hub`` module, imported when first needed (it is an optional
    dependency): a :class:`HubError` with the install command where it is missing."""
    try:
        import huggingface_hub
    except ImportError as err:
        raise HubError(
            "the Hugging Face Hub needs the huggingface_hub package; install it with: "
            f"pip install '{HF_REQUIREMENT}'"
        ) from err
    return huggingface_hub

class HfHub(Hub):
    """Kernel repositories on the Hugging Face Hub: the
    :class:`~kernelforge.hub.base.Hub` that talks to it through ``huggingface_hub``.

    Every method that takes a ``repo_id`` refuses a malformed one with ``ValueError``,
    and raises ``HubError`` where ``huggingface_hub`` is not installed, where the Hub
    cannot be reached or refuses the request, or where, offline, the download cache
    lacks what is asked for.

    Args:
        api: an ``huggingface_hub.HfApi`` (or an object with the same methods);
            ``None`` creates one on first use, which names kernelforge in its user
            agent (and, for a download, adds ``get_kernel``'s ``user_agent``). A client
            given here is used as it is, with its own user agent.
        cache: the download cache, or its directory; ``None`` for the default. An
            empty (or blank) string is refused, as ``hub=""`` is.
        token: a Hub token; ``None`` uses ``huggingface_hub``'s login.
        endpoint: another Hub endpoint (``HF_ENDPOINT`` is honoured by default).
        offline: never use the network; ``None`` follows ``HF_HUB_OFFLINE``.

    Raises:
        ValueError: ``cache`` is an empty or blank string.

    Example:
        >>> hub = HfHub()                                             # doctest: +SKIP
        >>> hub.variants("kernels-community/relu", hub.resolve("kernels-community/relu", "v1"))
    """

    kind = "hf"

    def __init__(
        self,
        *,
        api: Any | None = None,
        cache: DownloadCache | str | os.PathLike[str] | None = None,
        token: str | None = None,
        endpoint: str | None = None,
        offline: bool | None = None,
    ) -> None:
        refuse_empty_path(cache, "cache", "a download cache", EMPTY_CACHE_GIVE)
        self._api = api
        self._api_given = api is not None  # then it carries the caller's own user agent
        self._agent_clients: dict[tuple[str, object], Any] = {}  # a client per user_agent
        self.cache = cache if isinstance(cache, DownloadCache) else DownloadCache(cache)
        self.token = token
        self.endpoint = endpoint
        self._offline = offline
        self._for_load_kernel = False  # cache_only(for_load_kernel=True)
        # the repositories whose refs this hub could not keep, said once each (a load
        # lists the refs more than once)
        self._refs_unkept: set[str] = set()
        # the file sizes of the commits this hub listed on the Hub, by repository (lower
        # case) and commit: a file read whole is refused on them before its download
        self._listed_sizes: dict[tuple[str, str], dict[str, int]] = {}

    def __repr__(self) -> str:
        return f"HfHub(cache={str(self.cache.root)!r})"

    def describe(self) -> str:
        """``Hugging Face Hub`` (with the endpoint, when one was given)."""
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"Hugging Face Hub{where}" + (" (offline: download cache only)"
                                             if self.offline else "")

    @property
    def offline(self) -> bool:
        """Whether this hub uses the download cache only."""
        return hf_offline() if self._offline is None else self._offline

    def cache_only(self, *, for_load_kernel: bool = False) -> HfHub:
        """This hub without network access: everything comes from the download cache.

        Args:
            for_load_kernel: it is for :func:`~kernelforge.load_kernel`, which never
                downloads: what is missing from the cache is said to be missing for that
                reason (run ``kernelforge download``), whatever ``HF_HUB_OFFLINE`` is.

        Returns:
            The offline hub, sharing this one's cache, client and token.
        """
        hub = HfHub(api=self._api, cache=self.cache, token=self.token,
                    endpoint=self.endpoint, offline=True)
        hub._api_given = self._api_given
        hub._for_load_kernel = for_load_kernel
        return hub

    def _why_offline(self) -> str:
        """Why this hub uses the download cache only, in words."""
        if self._for_load_kernel:
            return "load_kernel never downloads"
        if self._offline:
            return "this HfHub was made offline (offline=True, or cache_only())"
        if _offline_variable() == "TRANSFORMERS_OFFLINE":
            return "TRANSFORMERS_OFFLINE is set (read as HF_HUB_OFFLINE when that is unset)"
        return "HF_HUB_OFFLINE is set"

    def _not_cached(self, what: str, advice: str) -> NotCachedError:
        """The error for ``what``, which this offline hub lacks in its download cache:
        the reason it is offline and what to do about it.

        Args:
            what: the missing thing (``repository 'org/name'``, ...).
            advice: what to do when the hub is offline by ``HF_HUB_OFFLINE`` or
                ``offline=True``; the hub of a :func:`~kernelforge.load_kernel`, which
                never downloads, gives its own, and so does ``kernelforge lock``
                (:func:`used_for`), which a lock file cannot help.
        """
        where = f"{what} is not in the download cache {self.cache.root}"
        if _purpose.get() == "lock" and not self._for_load_kernel:
            advice = _LOCK_OFFLINE_ADVICE
        if self._for_load_kernel:
            return NotCachedError(
                f"{where}; load_kernel never downloads (it reads the download cache only): "
                "run 'kernelforge download' on the project first (it fetches what the lock "
                "file pins), or load it with get_locked_kernel, which downloads what is "
                "missing")
        return NotCachedError(f"{where} and {self._why_offline()}; {advice}")

    def cache_key(self) -> tuple[Any, ...]:
        """What identifies this hub in the loader's in-process cache: the endpoint, the
        download cache, the client given (held, so that its ``id`` is never another's),
        the token (as a digest) and offline mode. The cache is named by its absolute
        path: a relative one names another cache after a change of directory."""
        token = (hashlib.sha256(self.token.encode()).hexdigest()
                 if isinstance(self.token, str) else None)
        given = Same(self._api) if self._api_given else None
        return ("hf", self.endpoint, str(self.cache.root.absolute()), given, token, self.offline)

    # --- the client ----------------------------------------------------------------

    def _client(self) -> Any:
        if self.offline:  # pragma: no cover - every caller checks first
            raise HubError(f"the Hugging Face Hub is offline here ({self._why_offline()})")
        if self._api is None:
            self._api = self._new_client(None)
        return self._api

    def _new_client(self, user_agent: str | dict[str, Any] | None) -> Any:
        from kernelforge import __version__

        return _huggingface_hub().HfApi(token=self.token, endpoint=self.endpoint,
                                        library_name="kernelforge",
                                        library_version=__version__, user_agent=user_agent)

    def _download_client(self) -> Any:
        """The client for a download: one that sends the context's ``user_agent``
        (:func:`sent_as`), unless the caller gave this hub its own client or turned
        ``huggingface_hub``'s telemetry off (``HF_HUB_DISABLE_TELEMETRY``), as Hugging
        Face's ``kernels`` does."""
        agent = _user_agent.get()
        if (agent is None or self._api_given
                or _huggingface_hub().constants.HF_HUB_DISABLE_TELEMETRY):
            return self._client()
        key = (("dict", tuple(sorted((k, repr(v)) for k, v in agent.items())))
               if isinstance(agent, dict) else ("str", agent))
        if key not in self._agent_clients:
            if len(self._agent_clients) >= _AGENT_CLIENTS:  # a new agent every call
                self._agent_clients.clear()
            self._agent_clients[key] = self._new_client(agent)
        return self._agent_clients[key]

    def _call(self, what: str, repo_id: str, method: str, *args: Any, writing: bool = False,
              client: Any = None, into_cache: bool = False, retry: bool = False,
              landed: Callable[[Exception, str], Any] | None = None, whole: bool = False,
              **kwargs: Any) -> Any:
        """Call an ``HfApi`` method (of ``client``, by default this hub's), turning its
        errors into :class:`HubError`; a write (``writing``) gets advice that fits a
        write, and a download into the download cache (``into_cache``) that cannot write
        it says so (:meth:`~kernelforge.cache.DownloadCache.write_error`). ``retry``: a
        read that ``huggingface_hub`` makes once, or a write, is tried again after a
        transient failure (:func:`_retry_wait`), with a WARNING for each wait, as it
        retries the others; the error then says how often it was tried. ``landed``: for
        a write whose failure may hide its success (:func:`_answer_lost`), called with
        the error and how often it was tried (as the error says it), before any other
        try: it returns what to take as the call's answer where the write was done all
        the same, ``None`` where it was not (only then is it tried again), and raises a
        :class:`HubError` where it cannot tell. ``whole``: the method answers with an
        iterator, read to the end here, where its requests are made."""
        fn = getattr(client if client is not None else self._client(), method)
        waits = iter(_RETRY_WAITS if retry else ())
        tries, waited = 1, 0.0
        while True:
            try:
                answer = fn(*args, **kwargs)
                return list(answer) if whole else answer
            except Exception as err:
                tried = f" (tried {tries} times over {waited:.0f} s)" if tries > 1 else ""
                if landed is not None and _answer_lost(err):
                    done = landed(err, tried)
                    if done is not None:
                        return done
                backoff = next(waits, None)
                wait = None if backoff is None else _retry_wait(err, backoff)
                if wait is None:
                    mapped = self._map_error(what, repo_id, err, writing, into_cache, tried)
                    if mapped is None:
                        raise
                    raise mapped from err
                logger.warning("kernelforge: %s for %s on the %s failed (%s); trying again "
                               "in %.0f s (try %d of %d)", what, repo_id, self.describe(),
                               _first_line(err),
                               wait, tries + 1, len(_RETRY_WAITS) + 1)
                _sleep(wait)
                tries, waited = tries + 1, waited + wait

    def _no_token(self) -> str | None:
        """Why this hub's requests carry no token, or ``None`` where they carry one (or
        that cannot be told): asked once the Hub refused a write for want of rights, so
        that a missing token is not taken for a read-only one. It follows
        ``huggingface_hub``'s own choice of the token to send (the client's, else none
        under ``HF_HUB_DISABLE_IMPLICIT_TOKEN``, else :func:`huggingface_hub.get_token`:
        HF_TOKEN, then the login's file) and asks the Hub nothing; ``get_token`` reaches
        the network only to exchange or refresh a token that is set up, which the
        refused request did a moment before and ``huggingface_hub`` keeps."""
        token = getattr(self._api, "token", None) if self._api_given else self.token
        if isinstance(token, str) or token is True:
            return None
        if token is False:
            return _NO_TOKEN_GIVEN
        try:
            hf = _huggingface_hub()
            if hf.constants.HF_HUB_DISABLE_IMPLICIT_TOKEN:
                return _IMPLICIT_OFF
            found = hf.get_token()
        except Exception as err:  # noqa: BLE001 - the Hub's refusal is the error to report
            logger.debug("could not tell whether a token was sent: %s", err)
            return None
        return None if found else _NO_LOGIN

    def _in_cache(self, err: OSError) -> bool:
        """Whether ``err``, met by a download into the download cache, is about the cache:
        it names no file (a write to a full disk) or one in the cache. Another file (the
        token huggingface_hub reads, say) is no failure of the download cache's."""
        if err.filename is None:
            return True  # a write (a full disk) names no file
        named = Path(os.path.abspath(os.fsdecode(err.filename)))
        return named.is_relative_to(os.path.abspath(self.cache.root))

    def _map_error(self, what: str, repo_id: str, err: Exception, writing: bool = False,
                   into_cache: bool = False, tried: str = "") -> HubError | None:
        """A :class:`HubError` saying what failed (``tried``: how often, when more than
        once) and what to do, or ``None`` to let an unexpected error through unchanged."""
        hf_errors: Any
        try:
            from huggingface_hub import errors as hf_errors
        except ImportError:  # pragma: no cover - a fake api without huggingface_hub
            hf_errors = None
        local_entry = getattr(hf_errors, "LocalEntryNotFoundError", ())
        answer = err.__cause__
        if (local_entry and isinstance(err, local_entry) and not _client_offline()
                and isinstance(answer, Exception)
                and isinstance(answer, hf_errors.HfHubHTTPError)):
            # hf_hub_download words most answers of the Hub to its first request (403,
            # 429, 5xx, a disabled repository) as a lost connection: the answer itself
            # says what to do
            err = answer
        failed = f"{what} for {repo_id} on the {self.describe()} failed: {err}{tried}"
        if (isinstance(err, OSError) and not isinstance(err, ConnectionError)
                and err.errno in WRITE_ERRNOS and into_cache and self._in_cache(err)):
            return self.cache.write_error(err, f"{what} for {repo_id}")  # not the network
        if hf_errors is not None:
            gated = getattr(hf_errors, "GatedRepoError", ())
            if gated and isinstance(err, gated):
                return HubError(
                    f"{what}: repository {repo_id!r} on the {self.describe()} is gated: ask "
                    "for access on its page, then log in with 'hf auth login' or pass token=")
            disabled = getattr(hf_errors, "DisabledRepoError", ())
            if disabled and isinstance(err, disabled):
                return HubError(
                    f"{what}: repository {repo_id!r} on the {self.describe()} is disabled: "
                    "the Hub serves none of its files to anyone, so no token or login "
                    "helps; use another repository, or ask its owner")
            if isinstance(err, hf_errors.RepositoryNotFoundError):
                return HubError(
                    f"repository {repo_id!r} not found on the {self.describe()} (or it is "
                    "private or gated: log in with 'hf auth login' or pass token=)"
                )
            if isinstance(err, hf_errors.RevisionNotFoundError):
                return HubError(f"{what}: the revision does not exist in {repo_id} on the "
                                f"{self.describe()}")
            remote_entry = getattr(hf_errors, "RemoteEntryNotFoundError", ())
            if remote_entry and isinstance(err, remote_entry):
                return HubError(f"{what}: no such file in {repo_id} on the {self.describe()} "
                                f"({err})")
            offline_mode = getattr(hf_errors, "OfflineModeIsEnabled", ())
            # a download in offline mode fails as a file missing from its own cache
            if (offline_mode and isinstance(err, offline_mode)) or (
                    local_entry and isinstance(err, local_entry) and _client_offline()):
                return HubError(f"{failed}; huggingface_hub is in offline mode (it reads "
                                "HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE, when imported): use "
                                "HfHub(offline=True) to load from the download cache, or "
                                "start the process without HF_HUB_OFFLINE")
            if isinstance(err, hf_errors.HfHubHTTPError):
                no_token = self._no_token() if writing and _refused_write(err) else None
                return HubError(f"{failed}; {_http_advice(err, writing, no_token)}")
        if _is_transport_error(err, getattr(hf_errors, "HTTPError", None)):
            return HubError(f"{failed}; {_network_advice(writing)}")
        if writing and isinstance(err, RuntimeError) and _raised_by_client(err):
            # an upload to the Hub's storage that failed: what failed it says what to do
            cause = err.__cause__
            if cause is None:
                return HubError(f"{failed}; {_WRITE_ADVICE}")
            failed = f"{failed} ({_first_line(cause)})"
            if hf_errors is not None and isinstance(cause, hf_errors.HfHubHTTPError):
                status = getattr(getattr(cause, "response", None), "status_code", None)
                if status in (401, 403):
                    return HubError(f"{failed}; {_STORAGE_REFUSED}")
                return HubError(f"{failed}; {_http_advice(cause, writing)}")
            return HubError(f"{failed}; {_WRITE_ADVICE}")
        return None

    # --- reading -------------------------------------------------------------------

    def _refs(self, repo_id: str, *, writing: bool = False
              ) -> tuple[dict[str, str], dict[str, str]]:
        """Branches and tags (offline: as last seen online); ``writing``: read for a
        publish, whose failure is not pointed to the download cache."""
        validate_repo_id(repo_id)
        if self.offline:
            cached = self.cache.load_refs(repo_id)
            if cached is None:
                raise self._not_cached(
                    f"repository {repo_id!r}",
                    "load it once with get_kernel while online (that keeps what an offline "
                    "get_kernel needs), or pin it in a lock file, run 'kernelforge download' "
                    "and load it offline with load_kernel(repo_id, lockfile=...)")
            return cached
        listed = _listed_refs.get()
        key = (Same(self), repo_id)
        if listed is not None:
            if writing:  # a publish reads the refs as they are now
                listed.pop(key, None)
            elif key in listed:
                branches, tags = listed[key]
                return dict(branches), dict(tags)
        branches, tags = self._list_refs(repo_id, writing)
        if listed is not None and not writing:
            listed[key] = (dict(branches), dict(tags))
        return branches, tags

    def _list_refs(self, repo_id: str, writing: bool
                   ) -> tuple[dict[str, str], dict[str, str]]:
        """:meth:`_refs` online: list them on the Hub, check them, and keep them (with the
        status on ``main``) in the download cache."""
        refs = self._call("listing refs", repo_id, "list_repo_refs", repo_id,
                          repo_type=REPO_TYPE, writing=writing, retry=True)
        branches = {str(b.name): str(b.target_commit) for b in refs.branches}
        tags = {str(t.name): str(t.target_commit) for t in refs.tags}
        for kind, found in (("branch", branches), ("tag", tags)):
            for name, target in found.items():
                if not is_commit(target):
                    raise HubError(
                        f"{repo_id} on the {self.describe()} lists the {kind} {name!r} at "
                        f"{target!r}, which is not a commit id; refusing to use the "
                        "repository (it is damaged or hostile)")
        main = branches.get(CARD_BRANCH)
        if main is not None:
            # Loads read the status (a redirect) on main: kept before the refs that name
            # it, so that an offline load after this listing knows it too. Where it
            # cannot be read now, the refs kept stay those before, whose status is known.
            try:
                self.read_file(repo_id, main, STATUS_FILE)
            except HubError as err:
                logger.info("%s: refs not kept in the download cache: %s on main could not "
                            "be read (%s)", repo_id, STATUS_FILE, err)
                return branches, tags
        try:
            self.cache.save_refs(repo_id, branches, tags)
        except HubError as err:  # a full disk, a read-only cache: the load goes on
            if repo_id.lower() not in self._refs_unkept:
                self._refs_unkept.add(repo_id.lower())
                logger.warning("kernelforge: %s: refs not kept in the download cache, so an "
                               "offline load finds those kept before (%s)", repo_id, err)
        else:
            self._refs_unkept.discard(repo_id.lower())
        return branches, tags

    def has_repo(self, repo_id: str) -> bool:
        """Whether the repository exists (offline: whether the cache knows it).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``True`` when its refs can be listed.
        """
        try:
            self._refs(repo_id)
        except HubError:
            return False
        return True

    def branches(self, repo_id: str) -> dict[str, str]:
        """Branches of a repository (offline: as the download cache last saw them).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{branch: commit}`` sorted by branch name.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist (or is private), the Hub cannot be
                reached, or, offline, the download cache does not know it.
        """
        return dict(sorted(self._refs(repo_id)[0].items()))

    def tags(self, repo_id: str) -> dict[str, str]:
        """Tags of a repository (offline: as the download cache last saw them).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{tag: commit}`` sorted by tag name.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist (or is private), the Hub cannot be
                reached, or, offline, the download cache does not know it.
        """
        return dict(sorted(self._refs(repo_id)[1].items()))

    def versions(self, repo_id: str) -> dict[int, str]:
        """Published kernel versions (branches ``v<N>``).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{N: commit}`` sorted by ``N``.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist (or is private), the Hub cannot be
                reached, or, offline, the download cache does not know it.
        """
        from kernelforge.hub.base import version_branches

        return version_branches(self.branches(repo_id))

    def resolve(self, repo_id: str, revision: str) -> str:
        """A branch, a tag or a (unique prefix of a) commit -> the full commit id.

        Args:
            repo_id: ``org/name``.
            revision: a branch, a tag, a full commit id or a prefix of at least 4 hex
                digits that matches one commit (offline: one the download cache knows).

        Returns:
            The 40-hex commit id.

        Raises:
            ValueError: a malformed ``repo_id``; a ``revision`` that is not a non-empty
                string.
            HubError: the repository does not exist, or nothing matches (offline:
                nothing in the cache matches).
        """
        if not isinstance(revision, str) or not revision:
            raise ValueError(f"revision: expected a branch, tag or commit, got {revision!r}")
        try:
            branches, tags = self._refs(repo_id)
        except NotCachedError:
            # Offline, a full commit id needs no refs (a `kernelforge download` keeps
            # none): whether its files are cached is for the fetch to say.
            if is_commit(revision.lower()):
                return revision.lower()
            raise
        if revision in branches:
            return branches[revision]
        if revision in tags:
            return tags[revision]
        if _HEX.fullmatch(revision.lower()):  # commit ids are hex, in either case
            revision = revision.lower()
        if is_commit(revision):
            return revision
        if self.offline:
            hits = [c for c in self.cache.known_commits(repo_id) if c.startswith(revision)]
            if PREFIX_RE.match(revision) and len(hits) == 1:
                return hits[0]
            raise HubError(f"revision {revision!r} of {repo_id} is not in the download cache "
                           f"(offline: {self._why_offline()}; branches known: "
                           f"{', '.join(branches) or 'none'})")
        if _HEX.fullmatch(revision) and not PREFIX_RE.match(revision):  # too short a prefix
            raise HubError(f"revision {revision!r} not found in {repo_id} on the "
                           f"{self.describe()}: not a branch ({', '.join(branches) or 'none'}), "
                           f"a tag ({', '.join(tags) or 'none'}) or a commit")
        info = self._call(f"revision {revision!r}", repo_id, "repo_info", repo_id,
                          revision=revision, repo_type=REPO_TYPE, retry=True)
        sha = getattr(info, "sha", None)
        if not is_commit(sha):
            raise HubError(f"revision {revision!r} not found in {repo_id} on the "
                           f"{self.describe()}")
        return str(sha)

    def _listing(self, repo_id: str, commit: str, *, writing: bool = False) -> list[str]:
        cached = self.cache.load_listing(repo_id, commit)
        if cached is not None:
            return cached
        if self.offline:
            raise self._not_cached(
                f"{repo_id} at {commit[:12]}: its file list",
                "load it once with get_kernel while online, or, for a locked project, run "
                "'kernelforge download' while online")
        sizes = {str(e.path): _listed_size(e)
                 for e in self._files_listed("listing files", repo_id, commit, writing)}
        files = list(sizes)
        for path in files:
            if not is_revision_path(path):
                raise HubError(
                    f"{repo_id} at {commit[:12]} on the {self.describe()} lists the file "
                    f"{path!r}, which is not a plain path inside the revision; refusing to "
                    "use the repository (it is damaged or hostile)")
        if len(self._listed_sizes) >= _LISTED_SIZES:
            self._listed_sizes.pop(next(iter(self._listed_sizes)))
        self._listed_sizes[(repo_id.lower(), commit)] = {
            p: n for p, n in sizes.items() if n is not None}
        self.cache.save_listing(repo_id, commit, files)
        return files

    def _files_listed(self, what: str, repo_id: str, commit: str, writing: bool
                      ) -> list[Any]:
        """The files of ``commit`` as the Hub lists them (path, size, git blob id, and
        large-file storage's size and sha256), read whole here; the folders, which have a
        tree id, are left out, as ``list_repo_files`` leaves them out. It is the one
        request that ``list_repo_files`` makes, and gives the sizes and digests too."""
        entries = self._call(what, repo_id, "list_repo_tree", repo_id, recursive=True,
                             revision=commit, repo_type=REPO_TYPE, writing=writing,
                             whole=True)
        return [e for e in entries if not hasattr(e, "tree_id")]

    def variants(self, repo_id: str, commit: str) -> list[str]:
        """Build variants held by a commit.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.

        Returns:
            Sorted variant names under ``build/`` at the commit (offline: from the
            cached file list, else the variants of it in the download cache).

        Raises:
            HubError: the commit's file list cannot be fetched (offline: nothing of the
                commit is cached), or it names a path outside the revision.
        """
        try:
            files = self._listing(repo_id, commit)
        except HubError:
            if not self.offline:
                raise
            cached = sorted({v for r, c, v in self.cache.entries()
                             if (r.lower(), c) == (repo_id.lower(), commit)})
            if not cached:  # nothing of this revision was downloaded: say so, with advice
                raise
            return cached
        return sorted({p.split("/")[1] for p in files
                       if p.startswith("build/") and p.count("/") >= 2})

    def holds_build(self, repo_id: str, commit: str) -> bool:
        """Whether a commit holds any file under ``build/``.

        The Hub needs a version's branch before the commit that fills it, so a branch
        whose commit holds none is one a publish made a moment ago (its commit still to
        come) or one a publish that failed or was killed left behind: loads that pin no
        version pass over it (:func:`kernelforge.revisions.select`). It is told from the
        commit's file list, which the load reads anyway (it names the variants), so it
        costs no request of its own.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.

        Returns:
            ``True`` when a file of the commit is under ``build/`` (offline, where the
            download cache has no file list of the commit: when it holds a variant of
            it).

        Raises:
            HubError: as :meth:`variants`.
        """
        try:
            files = self._listing(repo_id, commit)
        except HubError:
            if not self.offline:
                raise
            return bool(self.variants(repo_id, commit))  # raises what the cache lacks
        return any(p.startswith("build/") for p in files)

    def _download(self, repo_id: str, commit: str, path: str, dest_dir: Path) -> Path:
        """Download one file into ``dest_dir`` (its relative path kept); return it."""
        got = self._call(f"downloading {path}", repo_id, "hf_hub_download", repo_id,
                         path, client=self._download_client(), revision=commit,
                         repo_type=REPO_TYPE, local_dir=str(dest_dir), into_cache=True)
        return Path(str(got))

    def read_file(self, repo_id: str, commit: str, path: str) -> bytes | None:
        """One file of a revision, through the download cache.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            path: the path in the revision.

        Returns:
            Its bytes, or ``None`` when the revision's listing has no such file.

        Raises:
            HubError: it cannot be fetched (offline: it is not cached), or it is bigger
                than :data:`~kernelforge.hub.base.SMALL_FILE_MAX` (not kept then; not
                downloaded either where the file list this hub fetched gives its size).
        """
        def fetch(dest: Path) -> bool:
            if path not in self._listing(repo_id, commit):
                return False
            listed = self._listed_sizes.get((repo_id.lower(), commit), {}).get(path)
            if listed is not None:  # the Hub's file list says: none of it is downloaded
                check_small_file(repo_id, commit, path, listed, self.describe())
            got = self._download(repo_id, commit, path, dest.parent / "dl")
            # checked before the cache keeps it or anything reads it (check_small_file)
            check_small_file(repo_id, commit, path, got.stat().st_size, self.describe())
            os.replace(got, dest)
            return True

        if self.offline:
            return self.cache.get_file(repo_id, commit, path, None, not_cached=lambda: (
                self._not_cached(
                    f"{repo_id}: {path} at {commit[:12]}",
                    "load the kernel once with get_kernel while online, or, for a locked "
                    "project, run 'kernelforge download' while online and load it with "
                    "load_kernel(repo_id, lockfile=...)")))
        return self.cache.get_file(repo_id, commit, path, fetch)

    def fetch_variant(
        self, repo_id: str, commit: str, variant: str, *, refresh: bool = False
    ) -> Fetched:
        """Download one variant into the cache (once), or find it there.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            variant: the variant name.
            refresh: discard a cached copy first (it failed verification).

        Returns:
            The :class:`~kernelforge.hub.base.Fetched` variant, with the sha256 of
            every file as checked when it was downloaded.

        A damaged cache entry (its ``files/`` or ``metadata.json`` gone, or that not
        parsing) is fetched again, with a WARNING log line; offline, it is an error that
        says how to replace it.

        Raises:
            HubError: offline and not cached (or cached but damaged), or the download
                failed.
            IntegrityError: the downloaded files do not match the variant's metadata
                digest (nothing is cached then).
        """
        if refresh and not self.offline:
            self.cache.discard(repo_id, commit, variant)
        entry = self.cache.entry(repo_id, commit, variant)
        if entry is not None and entry.damaged is None:
            return Fetched(entry.path, entry.files)
        if entry is not None:
            what = (f"{repo_id}: the download cache entry of variant {variant} at "
                    f"{commit[:12]} ({entry.path.parent}) is damaged: {entry.damaged}")
            if self.offline:
                raise HubError(
                    f"{what}; it cannot be fetched again here ({self._why_offline()}). Fix: "
                    f"{self.cache.damaged_entry_fix(repo_id, commit)}")
            logger.warning("kernelforge: %s; fetching it again", what)
        elif self.offline:
            raise self._not_cached(
                f"{repo_id} variant {variant} at {commit[:12]}",
                "load it once with get_kernel while online (kernel_info and 'kernelforge "
                "info' do not download it), or, for a locked project, run 'kernelforge "
                "download' while online")
        prefix = f"build/{variant}/"
        wanted = [p for p in self._listing(repo_id, commit) if p.startswith(prefix) and _wanted(p)]
        if not wanted:
            raise HubError(f"variant {variant!r} not found in {repo_id} at {commit[:12]}")

        def fill(files_dir: Path) -> None:
            dl = files_dir.parent / "dl"
            for path in wanted:
                target = files_dir.joinpath(*path[len(prefix):].split("/"))
                make_dirs(target.parent)
                cached = self.cache.peek_file(repo_id, commit, path)  # fetched for trust
                if cached is not None:
                    target.write_bytes(cached)
                else:
                    os.replace(self._download(repo_id, commit, path, dl), target)
            shutil.rmtree(dl, ignore_errors=True)

        def check(files_dir: Path) -> dict[str, str]:
            try:
                return _check_download(files_dir)
            except IntegrityError as err:  # named by the temporary folder, gone at once
                # The damaged file may be the metadata.json kept from choosing the
                # variant, whose digests the others failed: dropped too, so that trying
                # again fetches every file anew, as the error says.
                self.cache.discard_file(repo_id, commit, f"{prefix}metadata.json")
                raise IntegrityError(
                    err.where, err.problems,
                    what=f"{repo_id} variant {variant} at {commit[:12]}: the files the "
                         f"{self.describe()} served do not match the digests its "
                         "metadata.json records:",
                    fix="nothing was cached; try again (a download damaged on its way is "
                        "fetched anew), and if it fails the same way, the repository's "
                        "build is damaged: tell its publisher") from err

        entry = self.cache.install(repo_id, commit, variant, fill, check)
        return Fetched(entry.path, entry.files, fetched=entry.fetched)

    # --- writing -------------------------------------------------------------------

    def publish(
        self,
        repo_id: str,
        build_dir: str | os.PathLike[str],
        *,
        version: int,
        message: str = "",
        card: str | None = None,
        signer: SigningKey | None = None,
    ) -> Revision:
        """Publish a ``build/`` directory as one commit on branch ``v<version>``.

        The commit adds every variant (and its signature when ``signer`` is given) and
        deletes the files of variants no longer built; the Hub applies a commit
        atomically, and ``parent_commit`` makes it fail rather than overwrite a
        concurrent publish. Creating the repository, the branch and the commit are tried
        again after a transient failure (a busy Hub, a rate limit, a timeout, a
        connection cut off), the commit only once the branch's head shows that the
        failed try made no commit: a head holding exactly this publish's files is taken
        as its commit, with a WARNING.

        Args:
            repo_id: ``org/name``; created (as a kernel repository, with the Hub's
                default visibility, which a WARNING names when public) when missing.
            build_dir: ``build/`` or the project directory holding it.
            version: the major version (branch ``v<version>``); every variant's
                ``metadata.json`` ``version`` must equal it (or be absent).
            message: the commit message.
            card: README text, committed on the version branch and on ``main``. Without
                one the version branch keeps the card it has.
            signer: sign every variant (``build/<variant>.sig``).

        Returns:
            The new :class:`~kernelforge.hub.base.Revision`; where the branch holds these
            files already, the Hub makes no commit: the branch's head, with itself as
            its parent.

        Raises:
            ValueError: a malformed ``repo_id`` or ``version``, an empty or blank
                ``build_dir`` string, a ``message`` or ``card`` that is not a string,
                a ``card`` bigger than :data:`~kernelforge.hub.base.SMALL_FILE_MAX`
                (16 MiB: a later publish without a card could not read it back).
            TypeError: a ``signer`` that is not a
                :class:`~kernelforge.signing.SigningKey`.
            HubError: the build is unfit to publish (or a file of it cannot be read),
                the hub is offline, or the Hub refused the commit.
            IntegrityError: a variant's files do not match its recorded digest
                ("refusing to publish", as :meth:`LocalHub.publish
                <kernelforge.hub.LocalHub.publish>` says).
            TrustError: ``signer`` is given but a variant's ``metadata.json`` records
                no file digests (a signature would not cover its code).
        """
        from kernelforge.hub._staging import stage_build

        hf = _huggingface_hub()

        check_publish_arguments(repo_id, build_dir, version, message, card, signer)
        if self.offline:
            raise HubError(f"cannot publish to the Hugging Face Hub offline "
                           f"({self._why_offline()})")
        staged = stage_build(Path(build_dir), version)
        if signer is not None:
            from kernelforge.signing import check_signable

            check_signable(staged.digests, build_dir, staged.unversioned)
        contents = _read_staged(staged)  # checked, then uploaded: the same bytes
        branch = f"v{version}"
        files: dict[str, bytes] = {}  # what the commit adds, by path in the repository
        for _src, rel in staged.files:
            data = contents[rel]
            if signer is not None and rel.endswith("/metadata.json") and rel.count("/") == 2:
                variant = rel.split("/")[1]
                files[signature_path(variant)] = signer.sign_variant(variant, data,
                                                                     repo_id=repo_id)
            files[rel] = data
        if card is not None:
            files["README.md"] = card.encode("utf-8")
        ops: list[Any] = [hf.CommitOperationAdd(path_in_repo=p, path_or_fileobj=d)
                          for p, d in files.items()]
        self._create_repo(repo_id)
        created = self._create_branch(repo_id, branch)
        parent: str | None = None
        try:
            parent = self._refs(repo_id, writing=True)[0].get(branch)
            old = self._listing(repo_id, parent, writing=True) if parent else []
            gone = [p for p in old if p.startswith("build/") and p not in files]
            ops.extend(hf.CommitOperationDelete(path_in_repo=p) for p in gone)
            what = f"publishing branch {branch}"
            info = self._call(what, repo_id, "create_commit",
                              repo_id, operations=ops,
                              commit_message=message or f"Publish version {version}",
                              repo_type=REPO_TYPE, revision=branch, parent_commit=parent,
                              writing=True, retry=parent is not None,
                              landed=lambda err, tried: self._landed_commit(
                                  repo_id, branch, parent, files, gone, what, err, tried))
        except BaseException:
            # A new branch left without the build would be the newest version.
            if created:
                self._drop_new_branch(repo_id, branch, parent)
            raise
        commit = str(getattr(info, "oid", "") or "")
        if not is_commit(commit):
            commit = self.resolve(repo_id, branch)
        if commit == parent:  # the Hub makes no commit that would change nothing
            logger.info("%s %s already holds this build: no new commit", repo_id, branch)
        if card is not None:
            self._update_card(repo_id, branch, commit, card, message)
        try:
            self._refs(repo_id, writing=True)  # refresh the cached refs
        except HubError as err:  # the build is published: only the cache is behind
            logger.warning("kernelforge: %s: published %s at %s, but the refs kept in the download "
                           "cache could not be refreshed (%s); the next online load lists them "
                           "anew", repo_id, branch, commit[:12], err)
        logger.info("published %s %s at %s (%s)", repo_id, branch, commit[:7],
                    ", ".join(staged.variants))
        return Revision(repo_id, commit, branch, parent, time.time(), message, staged.variants)

    def _landed_commit(self, repo_id: str, branch: str, parent: str | None,
                       files: dict[str, bytes], gone: list[str], what: str,
                       err: Exception, tried: str) -> _Landed | None:
        """After a commit on ``branch`` whose answer was lost (``err``, after ``tried``,
        as :meth:`_call` words them), look at the branch's head once. A new commit whose
        files are exactly ``parent``'s with this publish's changes (``files`` added,
        ``gone`` deleted), by their digests, is this publish's commit: it is taken as the
        answer, with a WARNING (the commit message is not looked at: any publisher may
        write it). ``None``: the head is still ``parent``, so nothing was committed.

        Raises:
            HubError: it cannot be told (the head cannot be read, or it is a commit that
                holds other files: another publish's, perhaps made on top of this one);
                the same publish run again finishes either way.
        """
        failed = f"{what} for {repo_id} on the {self.describe()} failed: {err}{tried}"

        def unknown(why: str) -> HubError:
            return HubError(f"{failed}; the Hub's answer was lost, so the commit may have "
                            f"been made all the same, and {why}: run the same publish again "
                            "(it makes no second commit of what the branch holds)")

        if parent is None:  # pragma: no cover - read before every commit
            raise unknown("the branch's head before it is not known")
        try:
            head = self._refs(repo_id, writing=True)[0].get(branch)
            if head is None or head == parent:  # no commit removes a branch
                return None
            now = self._tree(repo_id, head)
            before = self._tree(repo_id, parent)
        except HubError as lookup:
            raise unknown(f"the branch's head could not be read to tell ({lookup})") from err
        expected = {p: e for p, e in before.items() if p not in files and p not in gone}
        if (set(now) != set(expected) | set(files)
                or any(now[p] != e for p, e in expected.items())
                or not all(_holds(now[p], data) for p, data in files.items())):
            raise unknown(f"the branch's head is now {head[:12]}, which holds other files "
                          "than this publish's (another publish's, made after it or "
                          "instead of it)")
        logger.warning("kernelforge: %s: the Hub's answer to the commit on %s was lost (%s), but "
                       "the branch's head %s holds exactly this publish's files: it is this "
                       "publish's commit", repo_id, branch, _first_line(err), head[:12])
        return _Landed(head)

    def _tree(self, repo_id: str, commit: str) -> dict[str, tuple[str, str | None]]:
        """Every file of ``commit``: its git blob id and, for a large file (LFS), the
        sha256 of its contents (a file listed without a blob id matches no contents)."""
        tree: dict[str, tuple[str, str | None]] = {}
        for entry in self._files_listed(f"listing the files of {commit[:12]}", repo_id,
                                        commit, writing=True):
            blob = getattr(entry, "blob_id", None)
            sha256 = getattr(getattr(entry, "lfs", None), "sha256", None)
            tree[str(entry.path)] = (blob if isinstance(blob, str) else "",
                                     sha256 if isinstance(sha256, str) else None)
        return tree

    def _update_card(self, repo_id: str, branch: str, commit: str, card: str,
                     message: str) -> None:
        """Commit the card on ``main`` after the build's commit on ``branch`` (at
        ``commit``), which holds it too. The Hub has no commit across branches: where this
        one fails, the build is published all the same, and the error says so, since
        the same publish run again only updates the card. It is tried again after a
        transient failure whatever became of the failed try: a card that landed makes
        the next try a commit of nothing, which the Hub does not make."""
        hf = _huggingface_hub()
        try:
            self._call("updating the card on main", repo_id, "create_commit", repo_id,
                       operations=[hf.CommitOperationAdd(path_in_repo="README.md",
                                                         path_or_fileobj=card.encode("utf-8"))],
                       commit_message=message or "Update card", repo_type=REPO_TYPE,
                       revision=CARD_BRANCH, writing=True, retry=True)
        except HubError as err:
            raise HubError(
                f"{repo_id} {branch} holds the build and its card (revision {commit[:12]}), "
                f"but the card on main was not updated: {err}; run the same publish again "
                "to update it (it makes no second commit of the build)") from err

    def _create_repo(self, repo_id: str) -> None:
        """Create the repository where it is missing, and say so with its visibility (the
        Hub makes it public unless its owner's default is private): a publish that made a
        public repository by a typo of the name, or where a private one was meant, is
        then seen. A repository that exists is left as it is: the Hub answers 409, or
        401/402/403 to a token that may not create one there (then its refs are read, as
        ``create_repo(exist_ok=True)`` reads them). A 409 after a try whose answer was
        lost is taken as that try's repository unless the repository holds a version
        branch or a tag: then it was there before."""
        lost = _AnswerLost()
        made = "did not exist: created it"
        try:
            self._call("creating the repository", repo_id, "create_repo", repo_id,
                       repo_type=REPO_TYPE, writing=True, retry=True, landed=lost)
        except HubError as err:
            status = getattr(getattr(err.__cause__, "response", None), "status_code", None)
            if status == 409 and (not lost.seen or self._published_to(repo_id)):
                return
            if status == 409:  # most likely made by the try whose answer was lost
                made = ("did not exist, as far as can be told (the Hub's answer to creating "
                        "it was lost, and trying again found it): created it")
            elif status in (401, 402, 403):
                try:
                    self._refs(repo_id, writing=True)
                except HubError:
                    raise err from err.__cause__
                return
            else:
                raise
        try:
            info = self._call("reading the new repository's visibility", repo_id, "repo_info",
                              repo_id, repo_type=REPO_TYPE, writing=True)
            private = getattr(info, "private", None)
        except HubError as err:
            self._unknown_visibility(repo_id, made, str(err))
            return
        if not isinstance(private, bool):  # an answer without it says nothing either way
            self._unknown_visibility(repo_id, made, "the Hub's answer does not say")
            return
        if private is False:
            logger.warning("kernelforge: %s %s on the %s as a public repository (its owner's "
                           "default), which anyone can see and load from; to keep it private, make "
                           "it private in its settings on the Hub (or create it private before "
                           "publishing)", repo_id, made, self.describe())
        else:
            logger.info("%s %s on the %s (private: %s)", repo_id, made, self.describe(),
                        private)

    def _published_to(self, repo_id: str) -> bool:
        """Whether ``repo_id`` holds a branch other than ``main`` or a tag, which a
        repository created a moment ago by a try whose answer was lost does not: it was
        there before, and is not said to be created. ``False`` where its refs cannot be
        read (the publish's next read of them says why)."""
        try:
            branches, tags = self._refs(repo_id, writing=True)
        except HubError:
            return False
        return bool(tags) or any(b != CARD_BRANCH for b in branches)

    def _unknown_visibility(self, repo_id: str, made: str, why: str) -> None:
        """The WARNING of a repository created (``made`` says how surely) without learning
        whether it is public: it may be, so the user is sent to look."""
        logger.warning("kernelforge: %s %s on the %s, but could not read whether it is public "
                       "(%s); check its settings on the Hub", repo_id, made, self.describe(), why)

    def _create_branch(self, repo_id: str, branch: str) -> bool:
        """Create ``branch`` (from ``main``, as the Hub does); ``True`` when this call
        made it, ``False`` when it was there already (the Hub answers 409, or 403 to a
        token that may commit to a branch but not create one, as ``exist_ok=True``
        takes them). A try whose answer was lost is tried again; a 409 after it is taken
        as this call's branch where the branch points at ``main``'s head, as one just
        made does, so that a failed commit deletes it again (:meth:`_drop_new_branch`);
        a branch elsewhere was there before (a version published earlier) and is kept."""
        lost = _AnswerLost()
        try:
            self._call(f"creating branch {branch}", repo_id, "create_branch", repo_id,
                       branch=branch, repo_type=REPO_TYPE, writing=True, retry=True,
                       landed=lost)
        except HubError as err:
            status = getattr(getattr(err.__cause__, "response", None), "status_code", None)
            if status == 409:
                return lost.seen and self._at_main(repo_id, branch)
            if status == 403:
                try:
                    exists = branch in self._refs(repo_id, writing=True)[0]
                except HubError:
                    exists = False
                if exists:
                    return False
            raise
        return True

    def _at_main(self, repo_id: str, branch: str) -> bool:
        """Whether ``branch`` points at ``main``'s head, where the Hub creates a branch:
        ``False`` where the refs cannot be read (a branch is then never taken as new,
        since deleting one that holds a published version would lose it)."""
        try:
            branches = self._refs(repo_id, writing=True)[0]
        except HubError:
            return False
        return branches.get(branch) is not None and branches.get(branch) == branches.get(
            CARD_BRANCH)

    def _drop_new_branch(self, repo_id: str, branch: str, start: str | None) -> None:
        """Delete ``branch``, which this publish created at ``start`` (``None``: not
        read; the Hub creates a branch at ``main``'s head) and whose commit failed, while
        it still points there: a version branch without a build is passed over, with a
        WARNING, by every load that pins no version, and fails every load that pins it.
        A branch that moved (a concurrent publish committed to it) is kept. Best effort:
        the publish's own error is what the caller sees; where the branch cannot be
        deleted, or was not read when made and no longer matches ``main``, a WARNING
        says so."""
        try:
            branches = self._refs(repo_id, writing=True)[0]
            at = branches.get(branch)
            if at is None:
                return
            if at != (start or branches.get(CARD_BRANCH)):
                if start is None:
                    raise HubError(f"it points at {at[:12]}, not at main's head")
                return
            self._call(f"deleting branch {branch}", repo_id, "delete_branch", repo_id,
                       branch=branch, repo_type=REPO_TYPE, writing=True)
            self._refs(repo_id, writing=True)  # refresh the cached refs
        except Exception as err:
            logger.warning(
                "kernelforge: %s: branch %s, created by this failed publish, may hold no build and "
                "could not be deleted (%s); loads that pin no version pass over it with a "
                "warning, and a load of that version fails: publish again, or delete the "
                "branch on the Hub", repo_id, branch, err)


def _read_staged(staged: Staged) -> dict[str, bytes]:
    """The bytes of every staged file, ``{relpath: data}``, checked against each variant's
    metadata digest as a local publish checks its copy (same refusal, same words).

    Raises:
        HubError: a file of the build cannot be read (naming it).
        IntegrityError: a variant's files do not match its digest.
    """
    from kernelforge.digest import b64_sha256
    from kernelforge.hub._staging import build_file_error, check_digests

    contents: dict[str, bytes] = {}
    for src, rel in staged.files:
        try:
            contents[rel] = src.read_bytes()
        except OSError as err:
            raise build_file_error(src, err, staged) from err
    check_digests(None, staged, {rel: b64_sha256(data) for rel, data in contents.items()})
    return contents


def _listed_size(entry: Any) -> int | None:
    """A file's size in bytes as the Hub's file list gives it (its large-file storage's
    for a file kept there), ``None`` where the list gives none that is a size."""
    lfs = getattr(entry, "lfs", None)
    for size in (getattr(lfs, "size", None), getattr(entry, "size", None)):
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            return size
    return None


def _check_download(files_dir: Path) -> dict[str, str]:
    """Verify a downloaded variant against its own metadata digest; return every file's
    sha256 (``metadata.json`` included) for the cache entry."""
    from kernelforge.digest import compare, hash_file, hash_tree
    from kernelforge.hub._staging import read_metadata

    meta = read_metadata(files_dir)
    actual = hash_tree(files_dir)
    block = meta.get("digest")
    if block:
        expected = block["files"]
        got = actual if block["algorithm"] == "sha256" else hash_tree(
            files_dir, algorithm=block["algorithm"])
        problems = compare(got, expected)
        if problems:
            raise IntegrityError(files_dir, problems)
    files = dict(actual)
    files["metadata.json"] = hash_file(files_dir / "metadata.json")
    sigstore = files_dir / "metadata.json.sigstore"
    if sigstore.is_file():
        files["metadata.json.sigstore"] = hash_file(sigstore)
    return dict(sorted(files.items()))
