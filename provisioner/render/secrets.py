"""Which inventory variables are secrets: never written to a rendered inventory, a run
folder or a bundle.

A variable is a secret when its name, split at `_`, `-` and `.` into words, has one of
these words, or one of these pairs of neighbouring words, or when its value holds a
private key. The list is deliberately broad: a false positive is a warning (the variable
is left out, pass it another way), a false negative is a credential in every run folder.

- words: password, passwd, pass, passphrase, pwd, secret, secrets, token, tokens,
  apikey, credential, credentials, vault, cookie, otp, pin, privkey
- pairs: api key, access key, secret key, private key, auth key, signing key,
  encryption key, master key, ssh key, client secret, session token, service account,
  account key, sas key (aws_secret_access_key, azure client_secret, gcp service_account_*)
- a last word `key` (registry_key, ssh_key), except names of paths and public parts:
  a last word file, path, dir, url, id, name, type, size, length, fingerprint, pub, public
  keeps a variable (ansible_ssh_private_key_file is where a key is, not the key)
- a value holding `-----BEGIN ... PRIVATE KEY-----`

Applied to every variable of every host and group, and to the keys of mappings nested
in their values (`registry: {password: ...}` drops `registry.password`).
"""

from __future__ import annotations

import re
from typing import Any

WORDS = frozenset({"password", "passwd", "pass", "passphrase", "pwd", "secret", "secrets", "token", "tokens",
                   "apikey", "credential", "credentials", "vault", "cookie", "otp", "pin", "privkey"})
PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("auth", "key"),
                   ("signing", "key"), ("encryption", "key"), ("master", "key"), ("ssh", "key"),
                   ("client", "secret"), ("session", "token"), ("service", "account"), ("account", "key"),
                   ("sas", "key")})
NOT_SECRET_LAST = frozenset({"file", "path", "dir", "url", "id", "name", "type", "size", "length", "fingerprint",
                             "pub", "public", "enabled", "timeout"})
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


def words_of(name: str) -> list[str]:
    return [w for w in re.split(r"[_\-.\s]+", str(name).lower()) if w]


def is_secret_name(name: str) -> bool:
    words = words_of(name)
    if not words:
        return False
    if words[-1] in NOT_SECRET_LAST and len(words) > 1:
        return False
    if any(w in WORDS for w in words) or any(pair in PAIRS for pair in zip(words, words[1:])):
        return True
    return words[-1] == "key"


def holds_private_key(value: Any) -> bool:
    if isinstance(value, str):
        return bool(PRIVATE_KEY.search(value))
    if isinstance(value, dict):
        return any(holds_private_key(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_private_key(v) for v in value)
    return False


def strip(value: Any, path: str, dropped: list[str]) -> Any:
    """`value` without the secrets nested in it; each one dropped is named in `dropped`."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            where = f"{path}.{key}"
            if is_secret_name(str(key)) or holds_private_key(item) and not isinstance(item, (dict, list)):
                dropped.append(where)
            else:
                kept[key] = strip(item, where, dropped)
        return kept
    if isinstance(value, list):
        return [strip(item, f"{path}[{i}]", dropped) for i, item in enumerate(value)]
    return value
