"""The JSON body worker process (`python -c LAUNCH`): parses the request bodies the gateway hands it, one at a time, so
a large body's parse never holds the gateway's event loop (`gateway.body_parser` starts and feeds it).

On stdin: an 8-byte big-endian body length, a 4-byte depth limit, the body. On stdout: an 8-byte length and the
pickled `request_body.parse_json_body_as_data` answer. It runs niced (`NICENESS`) and exits at the end of stdin."""

from __future__ import annotations

import pickle
import struct
import sys
from typing import BinaryIO

from .request_body import parse_json_body_as_data

REQUEST_HEAD = struct.Struct(">QI")
ANSWER_HEAD = struct.Struct(">Q")
NICENESS = 10
"""The worker runs at a lower CPU priority than the gateway: on a busy host the other clients' requests (and the
gateway's loop handing bodies over) get the cores first, and large bodies wait for them."""


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer every request on `inp` on `out`, until `inp` ends."""
    while True:
        head = inp.read(REQUEST_HEAD.size)
        if len(head) < REQUEST_HEAD.size:
            return
        size, max_depth = REQUEST_HEAD.unpack(head)
        body = inp.read(size)
        if len(body) < size:
            return
        answer = pickle.dumps(parse_json_body_as_data(body, max_depth), protocol=5)
        del body
        out.write(ANSWER_HEAD.pack(len(answer)))
        out.write(answer)
        out.flush()


LAUNCH = (f"import os; os.nice({NICENESS}); import runpy; "  # niced before its imports: even its start yields
          "runpy.run_module('mma2a.json_worker', run_name='__main__')")
"""What `python -c` runs to start the worker."""

if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
