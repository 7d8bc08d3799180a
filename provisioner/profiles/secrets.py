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
- a value holding a secret whatever its name (`SECRET_VALUE`): a private key
  (`-----BEGIN ... PRIVATE KEY-----`), a URL's password (`https://user:pw@host`), a token
  in a vendor's published format (GitHub ghp_/gho_/ghu_/ghs_/ghr_/github_pat_, GitLab
  glpat-, Hugging Face hf_, Slack xox?-/xapp-) or a webhook URL whose path is its key (Slack's
  hooks.slack.com/services/..., Discord's /api/webhooks/...)

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
# A secret a value carries under any name. Tokens need 20 characters after the prefix:
# real ones have 30 or more, and a package such as hf_transfer must not count.
_URL_PASSWORD = r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@:]*:[^\s/@]*@"
_TOKEN = r"(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|hf_|xox[abposr]-|xapp-)[A-Za-z0-9_-]{20,}"
_WEBHOOK = (r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)"
            r"|(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks)/[^\s\"']+")
SECRET_VALUE = re.compile(f"{PRIVATE_KEY.pattern}|{_URL_PASSWORD}|{_TOKEN}|{_WEBHOOK}")


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


def holds_secret(value: Any) -> bool:
    """A string (or one nested in `value`) that carries a secret whatever its name."""
    if isinstance(value, str):
        return bool(SECRET_VALUE.search(value))
    if isinstance(value, dict):
        return any(holds_secret(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_secret(v) for v in value)
    return False


# What every redaction writes in place of a secret (run records, diagnose, the env record).
REDACTED = "[redacted by provision]"


def redact_values(text: str, mark: str = REDACTED) -> str:
    """`text` with every secret `SECRET_VALUE` finds replaced (a URL keeps its scheme and host)."""
    return SECRET_VALUE.sub(lambda m: f"{m.group('scheme')}{mark}@" if m.group("scheme") else mark, text)


def strip(value: Any, path: str, dropped: list[str]) -> Any:
    """`value` without the secrets nested in it; each one dropped is named in `dropped`."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            where = f"{path}.{key}"
            if is_secret_name(str(key)) or holds_secret(item) and not isinstance(item, (dict, list)):
                dropped.append(where)
            else:
                kept[key] = strip(item, where, dropped)
        return kept
    if isinstance(value, list):
        kept_items = []
        for i, item in enumerate(value):
            if holds_secret(item) and not isinstance(item, (dict, list)):
                dropped.append(f"{path}[{i}]")
            else:
                kept_items.append(strip(item, f"{path}[{i}]", dropped))
        return kept_items
    return value
