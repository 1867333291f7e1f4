"""A real SMTP server for gpuwatch's tests: aiosmtpd run by the system Python.

Listens on 127.0.0.1 (port 0 = a free one), prints "PORT <n>" on stdout once it accepts
connections, and saves every accepted message as DIR/<n>.eml (raw bytes) and DIR/<n>.json
(envelope, decoded headers and leaf parts, parsed by Python's `email` package), written
atomically and in that order.

Options:
  --user U --password-env VAR   accept AUTH PLAIN/LOGIN for U with the password in $VAR,
                                and answer 535 to anything else
  --tls none|starttls|implicit  starttls offers STARTTLS (AUTH only after it); implicit
                                wraps the socket in TLS from the first byte
  --cert PEM --key PEM          the server certificate (starttls, implicit)
  --reject-rcpt ADDR            answer 550 to RCPT TO:<ADDR>
  --tempfail-data               answer 451 to every DATA (a transient failure)
"""

import argparse
import asyncio
import email
import email.policy
import json
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Saver:
    def __init__(self, directory, reject_rcpt, tempfail_data):
        self.dir = directory
        self.n = 0
        self.reject_rcpt = reject_rcpt
        self.tempfail_data = tempfail_data

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.reject_rcpt and address.lower() == self.reject_rcpt.lower():
            return "550 5.1.1 <%s>: mailbox unavailable" % address
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.tempfail_data:
            return "451 4.3.0 try again later"
        self.n += 1
        raw = envelope.original_content or envelope.content
        base = os.path.join(self.dir, str(self.n))
        with open(base + ".eml.tmp", "wb") as f:
            f.write(raw)
        os.rename(base + ".eml.tmp", base + ".eml")
        doc = describe(raw)
        doc["mail_from"] = envelope.mail_from
        doc["rcpt_to"] = list(envelope.rcpt_tos)
        doc["authenticated"] = bool(session.authenticated)
        doc["tls"] = (
            session.ssl is not None
            or server.transport.get_extra_info("ssl_object") is not None
        )
        with open(base + ".json.tmp", "w") as f:
            json.dump(doc, f)
        os.rename(base + ".json.tmp", base + ".json")
        return "250 Message accepted for delivery"


def describe(raw):
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    headers = [[k, str(v)] for k, v in msg.items()]
    parts = []

    def walk(m):
        if m.is_multipart():
            return "%s(%s)" % (
                m.get_content_type(),
                ", ".join(walk(p) for p in m.iter_parts()),
            )
        content = m.get_content()
        text = content if isinstance(content, str) else None
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        parts.append(
            {
                "content_type": m.get_content_type(),
                "content_id": m.get("Content-ID"),
                "disposition": m.get_content_disposition(),
                "text": text,
                "hex": data.hex(),
            }
        )
        return m.get_content_type()

    structure = walk(msg)
    return {"headers": headers, "parts": parts, "structure": structure, "size": len(raw)}


def authenticator(user, password):
    def check(server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode("utf-8", "replace") == user
            and auth_data.password.decode("utf-8", "replace") == password
        )
        return AuthResult(success=ok, handled=False)

    return check


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--user")
    ap.add_argument("--password-env")
    ap.add_argument("--tls", choices=["none", "starttls", "implicit"], default="none")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--reject-rcpt")
    ap.add_argument("--tempfail-data", action="store_true")
    a = ap.parse_args()

    ctx = None
    if a.tls != "none":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.cert, a.key)
    kwargs = {"hostname": "smtp.test", "enable_SMTPUTF8": True}
    if a.user:
        kwargs["authenticator"] = authenticator(a.user, os.environ[a.password_env])
        # STARTTLS: AUTH only after the upgrade; plaintext and implicit TLS: at once.
        kwargs["auth_require_tls"] = a.tls == "starttls"
    if a.tls == "starttls":
        kwargs["tls_context"] = ctx
        kwargs["require_starttls"] = True
    handler = Saver(a.dir, a.reject_rcpt, a.tempfail_data)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, **kwargs),
        host="127.0.0.1",
        port=a.port,
        ssl=ctx if a.tls == "implicit" else None,
    )
    port = server.sockets[0].getsockname()[1]
    print("PORT %d" % port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
