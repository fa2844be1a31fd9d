"""The A2A-Extensions values a request carries: parsed once per distinct short value, the kept values bounded."""

from __future__ import annotations

from mma2a.gateway.downstream import service_params


def test_extension_values_are_parsed_and_the_kept_ones_stay_bounded() -> None:
    assert service_params.read_extensions(["urn:a, urn:b", "urn:c"]) == ("urn:a", "urn:b", "urn:c")
    long_value = ", ".join(f"urn:x:{i:04d}" for i in range(2000))  # ~22 KB, within a request head's 64 KiB
    assert service_params.read_extensions([long_value]) == tuple(f"urn:x:{i:04d}" for i in range(2000))
    assert long_value not in service_params._READ  # parsed, not kept
    for i in range(3 * service_params._READ_MAX):
        assert service_params.read_extensions([f"urn:y:{i}"]) == (f"urn:y:{i}",)
        assert len(service_params._READ) <= service_params._READ_MAX
    assert all(len(v) <= service_params._READ_LONGEST for v in service_params._READ)
