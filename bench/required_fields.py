"""bench/required_fields: what checking a request's required fields costs on the SDK's bindings (REST, streams,
gRPC), side by side in one run: the SDK's own walk of the request (`validate_proto_required_fields`, what an
a2a-sdk agent runs) and the gateway's cheap look (`sdk_requests.check_required`, which runs the walk only when
a field is missing, so a refused request carries the agent's own error).

    PYTHONPATH=src .venv/bin/python bench/required_fields.py
"""

from __future__ import annotations

import timeit

from a2a.types import GetTaskRequest, SendMessageRequest
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf import json_format

from mma2a.sdk_requests import check_required


def main() -> None:
    send = json_format.ParseDict({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}],
                                              "metadata": {"a": 1}}, "configuration": {"historyLength": 1}},
                                 SendMessageRequest())
    get = GetTaskRequest(id="t1")
    n = 20000
    for name, request in (("SendMessage", send), ("GetTask", get)):
        walk = timeit.timeit(lambda: validate_proto_required_fields(request), number=n) / n * 1e6
        cheap = timeit.timeit(lambda: check_required(request), number=n) / n * 1e6
        print(f"{name:12s} SDK walk {walk:8.2f} us   cheap look {cheap:6.2f} us   ratio {walk / cheap:6.1f}x")


if __name__ == "__main__":
    main()
