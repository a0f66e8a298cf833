"""DB_SSLMODE and the certificate files (libpq's words) as PyMySQL's TLS options.

- unset, ``allow``, ``prefer``: PyMySQL's own default, TLS when the server
  offers it, its certificate not checked (no client certificate is sent);
- ``disable``: never TLS;
- ``require``: TLS or no connection; the certificate is checked against
  DB_SSLROOTCERT when one is given (as libpq does), else not;
- ``verify-ca``: the certificate must be signed by DB_SSLROOTCERT (or the
  system's CAs); ``verify-full``: and name the host connected to.
DB_SSLCERT / DB_SSLKEY, a client certificate, go with ``require`` and above.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsj_queue_lib.settings import Settings

_VERIFIED = ("verify-ca", "verify-full")
# PyMySQL: CR_SSL_CONNECTION_ERROR, "SSL is required but the server doesn't support it".
_SSL_CONNECTION_ERROR = 2026
_CHECK = "check DB_SSLMODE, DB_SSLROOTCERT, DB_SSLCERT, DB_SSLKEY"


def ssl_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``pymysql.connect`` for the settings' TLS."""
    mode = settings.db_sslmode
    if mode == "disable":
        return {"ssl_disabled": True}
    if mode not in ("require", *_VERIFIED):
        return {}
    verify = mode in _VERIFIED or settings.db_sslrootcert is not None
    context = ssl.create_default_context(cafile=settings.db_sslrootcert)
    context.check_hostname = mode == "verify-full"
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if settings.db_sslcert and settings.db_sslkey:
        context.load_cert_chain(settings.db_sslcert, settings.db_sslkey)
    return {"ssl": context}


def tls_refused(exc: BaseException) -> str | None:
    """Why a failed connection is a TLS misconfiguration waiting would not cure, or None."""
    code = exc.args[0] if exc.args else None
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if code == _SSL_CONNECTION_ERROR or "CERTIFICATE_VERIFY_FAILED" in text:
        return f"{text} ({_CHECK})"
    return None
