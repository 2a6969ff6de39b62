"""PII redaction as in ROOTS: its high-risk categories (KEY, EMAIL, USER, IP_ADDRESS) become placeholders.

ROOTS (github.com/bigscience-workshop/data-preparation, preprocessing/training/02_pii/
bigscience_pii_detect_redact.py) replaced them with ``PI:<TAG>``; so do we (e-mails and IPs by default, keys
and user names when ``pii.secrets`` / ``pii.users`` are on, as in the roots preset). Every match is replaced at
its own span: ROOTS called ``str.replace(match, tag)`` over the whole document, which also replaced every other
occurrence of the matched string (a key "2021" matched once took every "2021" of the text with it). The
patterns are ours, written for ROOTS's intent so that the text around a match never changes:

- an e-mail is a local part (RFC 5322 ASCII "atext" and dots, plus RFC 6531's Unicode letters of
  spaced scripts: "prénom.nom@eigsi.fr" goes whole) ``@`` a dotted ASCII domain ending in a letter (or
  punycode ``xn--``) TLD; letters of unspaced scripts are not local-part characters, so that in
  "联系abc@example.com获取" only the address goes; a trailing full stop stays;
- an IPv4 address is four dotted decimal octets 0-255, not part of a longer dotted number (a version
  1.2.3.4.5 or a version v1.2.3.4 is left alone), and not a section number: four numbers 1-30 followed by a dot
  ("1.1.2.1. Scope") number a section (ROOTS and we once redacted them; an address ending a sentence, "... is 10.0.0.1."
  or "192.168.1.7.", holds a 0 or a number over 30 in all but 0.02% of random addresses, and stays redacted);
- an IPv6 address is any of the eight RFC 4291 text forms (full, ``::``-compressed, IPv4-embedded,
  zone-indexed link-local) holding at least one digit (ROOTS's rule against words like ``a::b``), not
  glued to more hex digits or colons.

- a user name (ROOTS's USER: "@" handles) is "@" and at least 3 word characters, dots or dashes (ending in a
  word character, so a sentence's full stop stays), at the start of the text or after a space, bracket,
  quote or punctuation (so an e-mail's "@" is never one);
- a key (ROOTS's KEY: "a sequence of digits and letters in the same string, optionally with spaces: credit
  card, API, SSH, GPG keys") is either a token of at least 20 characters of [A-Za-z0-9+/=_-] with at least
  4 digits and 4 letters that switches between letters and digits at least once per 8 characters (API
  tokens, hex digests; "state-of-the-art-2020" switches too rarely), or 13-19 digits in groups of at least 3
  separated by single spaces or dashes that pass the Luhn check (payment card numbers). ROOTS's own KEY
  pattern also took phone numbers, dates and any "ABC123" run.

datatrove's PIIFormatter redacts e-mails and public IPv4 addresses only (no IPv6), with fake addresses in
place of placeholders, so it is not used. Cost: one regex scan per category, each run only when the text
holds its trigger character (":" for IPv6, "@" for e-mails and users, a digit-dot-digit for IPv4, a digit
for keys).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from bloomdata.clean.sections import PiiConfig
from bloomdata.clean.text import UNSPACED

# A local-part character: ASCII atext, or (RFC 6531) a letter of a spaced script, so "prénom@x.fr"
# goes whole; letters of scripts without spaces are left out, so "联系abc@example.com获取" loses only the address.
# The two branches must not overlap (ASCII letters are left out of the second): "(?:A|B)+" over branches
# that share characters backtracks exponentially on a long run that is not followed by "@domain".
_LOCAL = rf"(?:[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]|[^\W\d_A-Za-z{UNSPACED}])"
_DOMAIN = (r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:[A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59})"
           r"(?![A-Za-z0-9-])")
# The whole address as one pattern (what ``redact`` finds, and what the tests check it against).
EMAIL = re.compile(rf"(?<!{_LOCAL})(?<!\.){_LOCAL}+(?:\.{_LOCAL}+)*@{_DOMAIN}")
# ``redact`` does not run EMAIL over the text: tried at every position, its two-branch character class made
# the PII step ~10x slower than an ASCII one. It starts from each "@" instead: the domain forwards, then the
# local part backwards (``L+(\.L+)*`` read backwards is the same pattern), capped at _LOCAL_MAX characters
# (RFC 5321 allows 64), so that many "@" without an address stay linear.
_DOMAIN_AT = re.compile(_DOMAIN)
_LOCAL_PART = re.compile(rf"{_LOCAL}+(?:\.{_LOCAL}+)*")
_LOCAL_CHAR = re.compile(rf"{_LOCAL}|\.")
_LOCAL_MAX = 256


def _redact_emails(text: str, placeholder: str) -> tuple[str, int]:
    """EMAIL.subn(placeholder, text) for local parts up to _LOCAL_MAX characters, anchored on each "@"."""
    pieces: list[str] = []
    last = 0
    at = text.find("@")
    while at != -1:
        domain = _DOMAIN_AT.match(text, at + 1)
        if domain:
            low = max(last, at - _LOCAL_MAX)
            local = _LOCAL_PART.match(text[low:at][::-1])
            start = at - local.end() if local else at
            # the address must start a run: after the previous one, not after a local character or a dot
            if local and start >= last and not (start and _LOCAL_CHAR.match(text, start - 1)):
                pieces += (text[last:start], placeholder)
                last = domain.end()
        at = text.find("@", max(at + 1, last))
    if not pieces:
        return text, 0
    pieces.append(text[last:])
    return "".join(pieces), len(pieces) // 2


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
IPV4 = re.compile(rf"(?<![0-9A-Za-z.]){_IPV4}(?![0-9]|\.[0-9])")  # not in a version "v11.2.3.45"
_SMALL = r"(?:[1-9]|[12][0-9]|30)"  # 1-30, no leading zero
SECTION = re.compile(rf"{_SMALL}(?:\.{_SMALL}){{3}}\.(?!\S)")  # "1.1.2.1." before a space or the end
_DIGIT_DOT = re.compile(r"[0-9]\.[0-9]")

_H = r"[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join([  # the first alternative that matches wins: longer forms first
    rf"[Ff][Ee]80:(?::{_H}){{0,4}}%[0-9A-Za-z]+",  # fe80::7:8%eth0
    rf"(?:{_H}:){{7}}{_H}",  # 1:2:3:4:5:6:7:8
    rf"(?:{_H}:){{1,4}}:{_IPV4}",  # 64:ff9b::192.0.2.33
    rf"(?:{_H}:){{6}}{_IPV4}",  # 1:2:3:4:5:6:1.2.3.4
    rf"::(?:[Ff]{{4}}(?::0{{1,4}})?:)?{_IPV4}",  # ::ffff:192.0.2.1, ::1.2.3.4
    rf"(?:{_H}:){{1,6}}(?::{_H}){{1,6}}",  # 1::8, 1:2::7:8 (the :: counted loosely; checked below)
    rf"(?:{_H}:){{1,7}}:",  # 1::, 1:2:3:4:5:6:7::
    rf":(?::{_H}){{1,7}}",  # ::8, ::2:3:4:5:6:7:8
])
IPV6 = re.compile(rf"(?<![0-9A-Fa-f:])(?:{_IPV6})(?![0-9A-Fa-f:])")


def _valid_ipv6(match: str) -> bool:
    """At most one ``::``, at most 8 groups, and a digit (``a::b`` and ``::`` alone are words, not IPs)."""
    if not any(c.isdigit() for c in match) or match.count("::") > 1:
        return False
    head = match.split("%")[0]
    groups = [g for g in head.replace("::", ":").split(":") if g]
    size = sum(2 if "." in g else 1 for g in groups)  # an embedded IPv4 is two groups
    return size == 8 if "::" not in head else size <= 7


_USER = re.compile(rf"(?<![^\s()\[\]{{}}<>,;:!?'\"{UNSPACED}])@\w[\w.-]+\w")  # "@" and 3+ characters
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{20,}(?![A-Za-z0-9+/=_-])")
_SWITCH = re.compile(r"[A-Za-z](?=[0-9])|[0-9](?=[A-Za-z])")
_CARD = re.compile(r"(?<![0-9])(?<![0-9][ -])[0-9]{3,}(?:[ -][0-9]{3,})*(?![0-9]|[ -][0-9])")


class Redaction(NamedTuple):
    """A redacted text and how many spans of each category went."""

    text: str
    emails: int = 0
    ips: int = 0
    keys: int = 0
    users: int = 0


def _is_key_token(token: str) -> bool:
    digits = sum(c.isdigit() for c in token)
    return digits >= 4 and len(token) - digits - sum(not c.isalnum() for c in token) >= 4 and \
        len(_SWITCH.findall(token)) * 8 >= len(token)


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _is_card(number: str) -> bool:
    digits = number.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _sub_if(pattern: re.Pattern, text: str, placeholder: str, keep) -> tuple[str, int]:
    """``pattern.sub`` replacing only the matches ``keep(match text)`` accepts, each at its own span."""
    found = 0

    def replace(match: re.Match) -> str:
        nonlocal found
        if not keep(match.group(0)):
            return match.group(0)
        found += 1
        return placeholder

    return pattern.sub(replace, text), found


def redact(text: str, config: PiiConfig) -> Redaction:
    """The text with PII replaced, and how many spans of each category."""
    emails = ips = keys = users = 0
    if not config.enabled:
        return Redaction(text)
    if config.emails and "@" in text:
        text, emails = _redact_emails(text, config.email_placeholder)
    if config.users and "@" in text:
        text, users = _USER.subn(config.user_placeholder, text)
    if config.ip_addresses:
        if ":" in text:
            text, ips = _sub_if(IPV6, text, config.ip_placeholder, _valid_ipv6)
        if _DIGIT_DOT.search(text):  # a cheap scan first: the IPv4 pattern tries its look-behind everywhere
            sections = {m.start() for m in SECTION.finditer(text)}
            pieces: list[str] = []
            last, n = 0, 0
            for m in IPV4.finditer(text):
                if m.start() not in sections:
                    pieces += (text[last:m.start()], config.ip_placeholder)
                    last, n = m.end(), n + 1
            if n:
                text, ips = "".join(pieces) + text[last:], ips + n
    if config.secrets and _HAS_DIGIT.search(text):
        text, found = _sub_if(_TOKEN, text, config.key_placeholder, _is_key_token)
        text, cards = _sub_if(_CARD, text, config.key_placeholder, _is_card)
        keys = found + cards
    return Redaction(text, emails, ips, keys, users)


_HAS_DIGIT = re.compile(r"[0-9]")
