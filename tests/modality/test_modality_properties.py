"""Property tests: MIME parsing and normalisation, and the matching laws."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mma2a.modality import Modality, accepts, modality_matches, normalize_modality, parse_modality

TOKEN_CHARS = "!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-"
tokens = st.text(TOKEN_CHARS, min_size=1, max_size=10).filter(lambda t: t != "*")
# Parameter values: anything (quotes, backslashes, `;`, spaces, newlines, unicode), and
# tokens glued to one awkward character, the edge where quoting decisions go wrong.
awkward = st.sampled_from(["\n", " ", "\t", '"', "\\", ";", "\r\n", "=", "é"])
values = st.one_of(
    st.text(max_size=12),
    st.builds(lambda a, b, c: a + b + c, st.text(TOKEN_CHARS, max_size=5), awkward, st.text(TOKEN_CHARS, max_size=3)),
)
spaces = st.sampled_from(["", " ", "  ", "\t"])


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def media_types(draw: st.DrawFn) -> str:
    """Media type strings as a sender might write them: any case, spacing, quoting."""
    type_, subtype = draw(tokens), draw(tokens)
    out = f"{type_}/{subtype}"
    for name in draw(st.lists(tokens, max_size=4)):
        value = draw(values)
        as_token = bool(value) and all(c in TOKEN_CHARS for c in value)
        written = value if as_token and draw(st.booleans()) else _quoted(value)
        out += f"{draw(spaces)};{draw(spaces)}{name}{draw(spaces)}={draw(spaces)}{written}"
    return out + draw(spaces)


concrete = media_types().map(parse_modality)


@given(media_types())
def test_normalise_is_idempotent(text: str) -> None:
    once = normalize_modality(text)
    assert normalize_modality(once) == once


@given(media_types())
def test_str_parses_back_to_an_equal_modality(text: str) -> None:
    mod = parse_modality(text)
    assert parse_modality(str(mod)) == mod
    assert mod.type == mod.type.lower() and mod.subtype == mod.subtype.lower()
    assert list(mod.params) == sorted(mod.params)


@given(tokens, tokens, st.dictionaries(tokens.map(str.lower), values, max_size=4))
def test_parse_keeps_every_parameter_value_exactly(type_: str, subtype: str, params: dict[str, str]) -> None:
    text = f"{type_}/{subtype}" + "".join(f"; {k}={_quoted(v)}" for k, v in params.items())
    mod = parse_modality(text)
    expected = {k: (v.lower() if k == "charset" else v) for k, v in params.items()}
    assert dict(mod.params) == expected
    assert mod.essence == f"{type_.lower()}/{subtype.lower()}"


@given(concrete)
def test_a_modality_matches_itself_its_type_wildcard_and_anything(mod: Modality) -> None:
    assert mod.matches(mod)
    assert mod.matches(parse_modality(f"{mod.type}/*"))
    assert mod.matches(parse_modality("*/*"))
    assert modality_matches(str(mod), mod.essence)
    assert accepts(["not a mode", f"{mod.type}/*"], str(mod))


@given(concrete, st.data())
def test_a_pattern_with_a_subset_of_the_parameters_matches(mod: Modality, data: st.DataObject) -> None:
    subset = data.draw(st.lists(st.sampled_from(mod.params), unique=True) if mod.params else st.just([]))
    pattern = Modality(mod.type, mod.subtype, tuple(sorted(subset)))
    assert mod.matches(pattern)
    assert modality_matches(mod, str(pattern))


@given(concrete, tokens, values)
def test_a_pattern_parameter_the_candidate_lacks_or_differs_in_does_not_match(mod: Modality, name: str, value: str) -> None:
    name = name.lower()
    pattern = parse_modality(f"{mod.essence}; {name}={_quoted(value)}")
    expected = mod.param(name) == pattern.param(name)
    assert mod.matches(pattern) is expected


@given(concrete, concrete)
def test_different_essences_do_not_match_exactly(a: Modality, b: Modality) -> None:
    if a.essence != b.essence:
        assert not a.matches(Modality(b.type, b.subtype))
    if a.type != b.type:
        assert not a.matches(parse_modality(f"{b.type}/*"))
