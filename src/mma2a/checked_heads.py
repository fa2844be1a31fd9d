"""uvicorn's httptools request cycle, each response header's checks made once per distinct name and value.

uvicorn checks every header of every response head against two regular expressions (a name, a value; ~1.2k
instructions a search, six a JSON-RPC answer: `date`, `content-length`, `content-type`). Here a name or a value that
passed is remembered (at most `REMEMBERED` of each; past it, checked afresh), so the next head of alike headers is
checked by two set lookups a header: the same heads go out, and a header that does not pass is refused as uvicorn
refuses it (`RuntimeError`, the same message), every time.

`send` and `on_headers_complete` are uvicorn 0.54.0's (which builds its cycle by name), but for the checks and the
cycle's class; with any other uvicorn release, its own protocol runs (`protocol_class`).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

import httptools
import uvicorn
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

COPIED_FROM = "0.54.0"  # the uvicorn release whose `send` and `on_headers_complete` these are
REMEMBERED = 4096  # names, and values, that passed the checks, kept (a changing value: a date, a length)

_names: set[bytes] = set()
_values: set[bytes] = set()


def check_header(name: bytes, value: bytes) -> None:
    """uvicorn's checks of a response header (`RuntimeError` for a name or a value it refuses), each made once for a
    name or a value that passes."""
    if name not in _names:
        if HEADER_RE.search(name):
            raise RuntimeError("Invalid HTTP header name.")  # pragma: full coverage
        if len(_names) >= REMEMBERED:
            _names.clear()
        _names.add(name)
    if value not in _values:
        if HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header value.")
        if len(_values) >= REMEMBERED:
            _values.clear()
        _values.add(value)


class CheckedCycle(RequestResponseCycle):
    """A request's cycle whose response head's headers are checked by `check_header`."""

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()  # pragma: full coverage

        if self.disconnected:
            return  # pragma: full coverage

        if not self.response_started:
            # Sending response status line and headers
            if message["type"] != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{message['type']}'.")

            self.response_started = True
            self.waiting_for_100_continue = False

            status_code = message["status"]
            headers = self.default_headers + list(message.get("headers", []))

            if self.access_log:
                self.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    get_client_addr(self.scope),
                    self.scope["method"],
                    get_path_with_query_string(self.scope),
                    self.scope["http_version"],
                    status_code,
                )

            # Write response status line and headers
            content = [STATUS_LINE[status_code]]
            has_connection_close = False

            for name, value in headers:
                check_header(name, value)

                name = name.lower()
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value.decode())
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection":
                    connection = [token.lower().strip() for token in value.split(b",")]
                    if b"close" in connection:
                        self.keep_alive = False
                        has_connection_close = True
                content.extend([name, b": ", value, b"\r\n"])

            if not self.keep_alive and not has_connection_close:
                content.append(b"connection: close\r\n")

            if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status_code not in (204, 304):
                # Neither content-length nor transfer-encoding specified
                self.chunked_encoding = True
                content.append(b"transfer-encoding: chunked\r\n")

            content.append(b"\r\n")
            self.transport.write(b"".join(content))

        elif not self.response_complete:
            # Sending response body
            if message["type"] != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{message['type']}'.")

            body = message.get("body", b"")
            more_body = message.get("more_body", False)

            # Write response body
            if self.scope["method"] == "HEAD":
                self.expected_content_length = 0
            elif self.chunked_encoding:
                if body:
                    content = [b"%x\r\n" % len(body), body, b"\r\n"]
                else:
                    content = []
                if not more_body:
                    content.append(b"0\r\n\r\n")
                self.transport.write(b"".join(content))
            else:
                num_bytes = len(body)
                if num_bytes > self.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                else:
                    self.expected_content_length -= num_bytes
                self.transport.write(body)

            # Handle response completion
            if not more_body:
                if self.expected_content_length != 0:
                    raise RuntimeError("Response content shorter than Content-Length")
                self.response_complete = True
                self.message_event.set()
                if not self.keep_alive:
                    self.transport.close()
                self.on_response()

        else:
            # Response already sent
            raise RuntimeError(f"Unexpected ASGI message '{message['type']}' sent, after response already completed.")


class CheckedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, its requests' cycles `CheckedCycle`s."""

    def on_headers_complete(self) -> None:
        http_version = self.parser.get_http_version()
        method = self.parser.get_method()
        self.scope["method"] = method.decode("ascii")
        if http_version != "1.1":
            self.scope["http_version"] = http_version
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        full_path = self.root_path + path
        full_raw_path = self.root_path.encode("ascii") + raw_path
        self.scope["path"] = full_path
        self.scope["raw_path"] = full_raw_path
        self.scope["query_string"] = parsed_url.query or b""

        # Handle 503 responses when 'limit_concurrency' is exceeded.
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            message = "Exceeded concurrency limit."
            self.logger.warning(message)
        else:
            app = self.app

        existing_cycle = self.cycle
        self.cycle = CheckedCycle(  # (by position: keywords to a class are made into a dict and back)
            self.scope,  # scope
            self.transport,  # transport
            self.flow,  # flow
            self.logger,  # logger
            self.access_logger,  # access_logger
            self.access_log,  # access_log
            self.server_state.default_headers,  # default_headers
            asyncio.Event(),  # message_event
            self.expect_100_continue,  # expect_100_continue
            http_version != "1.0" and self.parser.should_keep_alive(),  # keep_alive
            self.on_response_complete,  # on_response
        )
        if existing_cycle is None or existing_cycle.response_complete:
            # Standard case - start processing the request.
            self._start_asgi_task(self.cycle, app)
        else:
            # Pipelined HTTP requests need to be queued up.
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))


def protocol_class() -> type[HttpToolsProtocol]:
    """The httptools protocol to serve with: `CheckedHttpTools` on the uvicorn release it was copied from, else
    uvicorn's own."""
    return CheckedHttpTools if uvicorn.__version__ == COPIED_FROM else HttpToolsProtocol
