"""PII redaction as in ROOTS: e-mail addresses and IPv4/IPv6 addresses become placeholders.

ROOTS (github.com/bigscience-workshop/data-preparation, preprocessing/training/02_pii/
bigscience_pii_detect_redact.py) replaced them with ``PI:EMAIL`` and ``PI:IP_ADDRESS``; so do we by default.
The patterns are ours, written so that the text around a match never changes:

- an e-mail is a local part (RFC 5322 ASCII "atext" and dots, plus RFC 6531's Unicode letters of
  spaced scripts: "prénom.nom@eigsi.fr" goes whole) ``@`` a dotted ASCII domain ending in a letter (or
  punycode ``xn--``) TLD; letters of unspaced scripts are not local-part characters, so that in
  "联系abc@example.com获取" only the address goes; a trailing full stop stays;
- an IPv4 address is four dotted decimal octets 0-255, not part of a longer dotted number (a version
  1.2.3.4.5 is left alone);
- an IPv6 address is any of the eight RFC 4291 text forms (full, ``::``-compressed, IPv4-embedded,
  zone-indexed link-local) holding at least one digit (ROOTS's rule against words like ``a::b``), not
  glued to more hex digits or colons.

datatrove's PIIFormatter redacts e-mails and public IPv4 addresses only (no IPv6), with fake addresses in
place of placeholders, so it is not used. Cost: three regex scans, the IPv6 one only when the text holds
a colon, the e-mail one only when it holds an @.
"""

from __future__ import annotations

import re

from bloomdata.clean.config import PiiConfig
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
    pieces, last = [], 0
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
IPV4 = re.compile(rf"(?<![0-9.]){_IPV4}(?![0-9]|\.[0-9])")
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


def redact(text: str, config: PiiConfig) -> tuple[str, int, int]:
    """(text with PII replaced, e-mails replaced, IP addresses replaced)."""
    emails = ips = 0
    if not config.enabled:
        return text, 0, 0
    if config.emails and "@" in text:
        text, emails = _redact_emails(text, config.email_placeholder)
    if config.ip_addresses:
        if ":" in text:
            found = 0

            def ipv6(match: re.Match) -> str:
                nonlocal found
                if not _valid_ipv6(match.group(0)):
                    return match.group(0)
                found += 1
                return config.ip_placeholder

            text = IPV6.sub(ipv6, text)
            ips += found
        if _DIGIT_DOT.search(text):  # a cheap scan first: the IPv4 pattern tries its look-behind everywhere
            text, n = IPV4.subn(config.ip_placeholder, text)
            ips += n
    return text, emails, ips
