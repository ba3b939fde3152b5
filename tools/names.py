"""How the bindings name what the C ABI manifest names: one rule for every emitter, so that a
concept has the same name in C++, C# and Python (the README's table lists them).

- A C type drops `tr_` and is PascalCase: `tr_residency_config` -> `ResidencyConfig`,
  `tr_event_kind` -> `EventKind`; `dtype` and `minilm` keep their usual capitals (`DType`,
  `MiniLM`).
- An enum value is its constant's last words, PascalCase: TR_POLICY_FLOW -> `Flow`,
  TR_EVENT_KIND_WRITE_BACK -> `WriteBack`; a status drops TR_ERR_ (TR_ERR_NULL_ARG -> `NullArg`).
- Python keeps an enum as a dict `<NAME>_CODES`, keyed by the constant's last words:
  tr_policy -> POLICY_CODES = {"RESIDENT": 0, ...}; tr_status -> STATUS_CODES by full name.
"""
from __future__ import annotations

WORDS = {"dtype": "DType", "minilm": "MiniLM"}


def pascal(snake: str) -> str:
    return "".join(WORDS.get(w, w[:1].upper() + w[1:]) for w in snake.lower().split("_") if w)


def type_name(c_name: str) -> str:
    """`tr_residency_config` -> `ResidencyConfig`."""
    return pascal(c_name.removeprefix("tr_"))


def enum_type_name(c_name: str) -> str:
    return type_name(c_name)


def value_suffix(enum: str, constant: str) -> str:
    """TR_POLICY_FLOW of tr_policy -> FLOW; TR_ERR_NULL_ARG of tr_status -> NULL_ARG."""
    if enum == "tr_status":
        return constant.removeprefix("TR_ERR_").removeprefix("TR_")
    prefix = enum.upper() + "_"
    if not constant.startswith(prefix):
        raise SystemExit(f"names: {constant} of enum {enum} does not start with {prefix}")
    return constant.removeprefix(prefix)


def enum_value_name(enum: str, constant: str) -> str:
    return pascal(value_suffix(enum, constant))


def codes_name(enum: str) -> str:
    """The Python dict of an enum's codes: tr_event_kind -> EVENT_KIND_CODES."""
    return enum.removeprefix("tr_").upper() + "_CODES"


def is_handle(struct: dict) -> bool:
    """A handle struct: one `uint64_t id`, passed by value (tr_tensor, tr_scope, ...)."""
    return [(f["name"], f["type"]) for f in struct["fields"]] == [("id", "uint64_t")]
