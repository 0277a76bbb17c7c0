"""Reading a script URL on the server, to know its header and hash what was read: https only, no credentials
in the URL, every redirect held to the same rules, a size cap and a deadline. The job fetches the URL again
itself (`uv run URL`), as `hf jobs uv run` does.

HF_TRAIN_HTTP_SCRIPT_HOSTS (tests only): loopback hosts whose plain http:// URLs are read too, since tests serve
scripts from 127.0.0.1 and a test server has no certificate. Any other host stays https-only.
"""

import ipaddress
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urljoin, urlparse

from hf_train_mcp.errors import HubError, TrainError

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
FETCH_TIMEOUT_S = 20.0  # the whole read, redirects included (checked between reads)
READ_TIMEOUT_S = 5.0  # one read: so a read begun just before the deadline ends soon after it
MAX_REDIRECTS = 5
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _http_hosts() -> set[str]:
    listed = {h.strip() for h in os.environ.get("HF_TRAIN_HTTP_SCRIPT_HOSTS", "").split(",") if h.strip()}
    return {h for h in listed if h in _LOOPBACK}  # never a host off this machine


def check_url(url: str, *, remote: bool, timeout_s: float = FETCH_TIMEOUT_S) -> list[str]:
    """Refuse what a script URL may not be: not https, credentials in it, or (for a remote caller) a host that
    resolves inside this network, which the server could reach and the caller could not. Returns the addresses
    checked, which a remote caller's fetch connects to (pinned: a name that answers otherwise the second time,
    DNS rebinding, is never looked up again); [] where nothing is pinned (the local user, a test's loopback)."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if parsed.scheme != "https" and not (parsed.scheme == "http" and host in _http_hosts()):
        raise TrainError(f"script URL {url[:120]!r} is not https://: send an https URL (e.g. a raw GitHub or "
                         "huggingface.co/.../resolve/<commit>/ URL)")
    if parsed.username or parsed.password:
        raise TrainError("the script URL holds credentials: send a public URL, or the source itself as script")
    if not remote or host in _http_hosts():
        return []
    addresses = _addresses(host, parsed.port or 443, url, timeout_s)
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        inner = _embedded_ipv4(ip)
        # not is_global: private, loopback, link-local, CGNAT (100.64/10), reserved, unspecified
        if any(not a.is_global or a.is_multicast for a in (ip, *([inner] if inner else []))):
            raise TrainError("the script URL points into the server's own network, which callers over HTTP may "
                             "not reach: send a public https URL")
    return addresses


def _addresses(host: str, port: int, url: str, timeout_s: float) -> list[str]:
    """The host's addresses in the resolver's order, looked up within timeout_s (a resolver that hangs must not
    hold the call)."""
    from concurrent.futures import ThreadPoolExecutor, TimeoutError as Late

    pool = ThreadPoolExecutor(1)
    try:
        found = pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(timeout=timeout_s)
    except Late:
        raise HubError(f"looking up the host of script URL {url[:120]!r} took over {timeout_s:.0f} s: check it and "
                       "call again. Nothing was launched.") from None
    except OSError:
        raise TrainError(f"cannot resolve the host of script URL {url[:120]!r}") from None
    finally:
        pool.shutdown(wait=False)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not addresses:
        raise TrainError(f"cannot resolve the host of script URL {url[:120]!r}")
    return addresses


def _embedded_ipv4(ip) -> "ipaddress.IPv4Address | None":
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64 64:ff9b::/96), which is where it goes."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped or ip.sixtofour:
        return ip.ipv4_mapped or ip.sixtofour
    if ip.teredo:
        return ip.teredo[1]
    if ip in ipaddress.ip_network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def fetch_script(url: str, *, remote: bool) -> str:
    """The text at a script URL, read under the rules of check_url (each redirect too), all of it within
    FETCH_TIMEOUT_S (+ one READ_TIMEOUT_S): httpx's timeout bounds each read, and a server that trickles a
    byte at a time, or redirects slowly, would otherwise hold the call far longer."""
    import httpx

    current, deadline = url, time.monotonic() + FETCH_TIMEOUT_S
    for _ in range(MAX_REDIRECTS + 1):
        addresses = check_url(current, remote=remote, timeout_s=_left(deadline, url))
        try:
            with _opened(current, addresses, min(_left(deadline, url), READ_TIMEOUT_S)) as response:
                if response.is_redirect:
                    current = urljoin(current, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    raise TrainError(f"script URL {url[:120]!r} answered HTTP {response.status_code}: check it "
                                     "(a raw file URL, not a web page). Nothing was launched.")
                body = _body(response, url, deadline)
        except httpx.HTTPError as exc:
            raise HubError(f"could not read script URL {url[:120]!r} ({type(exc).__name__}); check it and call "
                           "again. Nothing was launched.") from None
        try:
            return body.decode()
        except UnicodeDecodeError:
            raise TrainError(f"the file at {url[:120]!r} is not text: send a Python script URL") from None
    raise TrainError(f"script URL {url[:120]!r} redirects more than {MAX_REDIRECTS} times")


@contextmanager
def _opened(url: str, addresses: list[str], timeout: float) -> Iterator[Any]:
    """The answer to GET url, not following redirects. With addresses (checked by check_url), the connection goes
    to one of them, in order, and to nothing else: the request line names the address, while the Host header,
    TLS's server name and the certificate check keep the URL's own name (httpx's `sni_hostname` extension). No
    proxy of the environment is used then: a proxy would look the name up again."""
    import httpx

    if not addresses:
        with httpx.stream("GET", url, timeout=timeout, follow_redirects=False) as response:
            yield response
        return
    target = httpx.URL(url)
    # the transport reads SSL_CERT_FILE as httpx does; the client no proxy and no .netrc of this server's
    with httpx.Client(transport=httpx.HTTPTransport(), trust_env=False, timeout=timeout,
                      follow_redirects=False) as client:
        for index, address in enumerate(addresses):
            request = client.build_request("GET", target.copy_with(host=address),
                                           headers={"Host": target.netloc.decode("ascii")},
                                           extensions={"sni_hostname": target.raw_host.decode("ascii")})
            try:
                response = client.send(request, stream=True)
            except httpx.ConnectError:
                if index == len(addresses) - 1:
                    raise
                continue  # the next address the name gave (an IPv6 one this machine cannot reach, say)
            try:
                yield response
            finally:
                response.close()
            return


def _left(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HubError(f"script URL {url[:120]!r} took over {FETCH_TIMEOUT_S:.0f} s to read: check it (or send the "
                       "source itself as script) and call again. Nothing was launched.")
    return left


def _body(response, url: str, deadline: float) -> bytes:
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        _left(deadline, url)
        if len(body) > MAX_SCRIPT_BYTES:
            raise TrainError(f"the script at {url[:120]!r} is over {MAX_SCRIPT_BYTES // 1024} KiB: is it a script? "
                             "Nothing was launched.")
    return body
