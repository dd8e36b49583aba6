"""Kubernetes resource quantities (`500m`, `16Gi`, `1e3`): parsing, adding, and the canonical form.

The API server stores a quantity in its canonical form (`1000m` becomes `1`, `1024Mi` becomes
`1Gi`). A child updated in place whose desired quantity is written differently would differ from
the stored one on every sync and be updated forever, so every quantity the hooks emit is written
canonically, the way the API server writes it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hooks.shared.messages import show

BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT = "BinarySI", "DecimalSI", "DecimalExponent"

_NUMBER = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_SUFFIX = {bits: suffix for suffix, bits in _BINARY.items()}
_NANO = Fraction(1, 10**9)
HINT = "a Kubernetes quantity such as 4, 500m, 1.5, 16Gi or 1e3"
# Far beyond any real resource amount, and what keeps exact arithmetic cheap: a hostile `1e999999999`
# would otherwise cost seconds of CPU and gigabytes of memory before failing.
MAX_DIGITS = 64
MAX_EXPONENT = 64


@dataclass(frozen=True)
class Quantity:
    """An exact amount and the suffix family it was written in (which decides how it is printed)."""

    value: Fraction
    format: str

    def __add__(self, other: Quantity) -> Quantity:
        # As Kubernetes' Quantity.Add: the sum keeps the format of the left operand.
        return Quantity(self.value + other.value, self.format)

    def canonical(self) -> str:
        """The string the API server stores for this quantity."""
        return _canonical(self.value, self.format)


def parse_quantity(raw: Any) -> Quantity:
    """A quantity from a manifest value (string, or a JSON number); ValueError when it is none."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ValueError(f"{raw!r} is not {HINT}")
    if isinstance(raw, int) and abs(raw) >= 10**MAX_DIGITS:
        raise ValueError(f"an integer of more than {MAX_DIGITS} digits is too large for a resource quantity")
    match = _NUMBER.match(repr(raw) if isinstance(raw, float) else str(raw))
    if not match:
        raise ValueError(f"{raw!r} is not {HINT}")
    sign, digits, suffix = match.groups()
    exp = _EXPONENT.match(suffix)
    exponent_too_big = exp is not None and (len(exp.group(1)) > 4 or abs(int(exp.group(1))) > MAX_EXPONENT)
    if len(digits) > MAX_DIGITS or exponent_too_big:
        raise ValueError(f"{show(raw, width=40)} is too large or too precise for a resource quantity (at most "
                         f"{MAX_DIGITS} digits and an exponent of at most {MAX_EXPONENT})")
    value = Fraction(digits if not digits.endswith(".") else digits[:-1])
    if suffix in _BINARY:
        value, fmt = value * 2 ** _BINARY[suffix], BINARY_SI
    elif suffix in _DECIMAL:
        value, fmt = value * Fraction(10) ** _DECIMAL[suffix], DECIMAL_SI
    elif exp is not None:
        value, fmt = value * Fraction(10) ** int(exp.group(1)), DECIMAL_EXPONENT
    else:
        raise ValueError(f"{raw!r} is not {HINT}")
    if sign == "-":
        value = -value
    # Kubernetes keeps nine decimal places and rounds anything finer up.
    nanos = value / _NANO
    if nanos.denominator != 1:
        value = Fraction(-((-nanos.numerator) // nanos.denominator)) * _NANO
    return Quantity(value, fmt)


def _canonical(value: Fraction, fmt: str) -> str:
    if value == 0:
        return "0"
    if fmt == BINARY_SI and (abs(value) < 1024 or value.denominator != 1):
        fmt = DECIMAL_SI  # small or fractional amounts are printed in decimal, as Kubernetes does
    if fmt == BINARY_SI:
        number, bits = int(value), 0
        while number % 1024 == 0 and bits < 60:
            number, bits = number // 1024, bits + 10
        return f"{number}{_BINARY_SUFFIX[bits]}"
    # Decimal: an integer mantissa without trailing zeros, its exponent lowered to a multiple of 3.
    exponent = 0
    while value.denominator != 1:
        value, exponent = value * 10, exponent - 1
    number = int(value)
    while number % 10 == 0:
        number, exponent = number // 10, exponent + 1
    while exponent % 3:
        number, exponent = number * 10, exponent - 1
    if fmt == DECIMAL_EXPONENT:
        return f"{number}e{exponent}" if exponent else str(number)
    while exponent > 18:
        number, exponent = number * 1000, exponent - 3
    return f"{number}{_DECIMAL_SUFFIX[exponent]}"
