"""`elova-mcp account`: local accounts that sign in on the approval page.

    elova-mcp account create --email EMAIL --name NAME   < password on stdin
    elova-mcp account set-password --email EMAIL         < password on stdin

The password is read from standard input (its first line; a prompt without echo when stdin
is a terminal), never from an argument, where it would end up in shell history and `ps`.
It is stored only as a slow salted hash (scrypt). Success prints one JSON object on stdout;
a refusal exits 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
import uuid
from typing import TextIO

import asyncpg
import msgspec

from service.cli.database_command import refuse, run_on_database
from service.config import Config
from service.errors import AccountRefused
from service.passwords import hash_password

_PROG = "elova-mcp account"
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
MAX_EMAIL_LENGTH = 320
MAX_NAME_LENGTH = 200


class AccountOutput(msgspec.Struct, rename="camel"):
    account_id: str
    email: str
    name: str


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "account",
        help="create a local account (password from stdin) or set its password",
        description="Local accounts sign in on the approval page with email and password.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create an account; the password is read from stdin")
    create.add_argument("--email", required=True)
    create.add_argument("--name", required=True)
    reset = actions.add_parser("set-password", help="replace an account's password (from stdin)")
    reset.add_argument("--email", required=True)


def read_password(stream: TextIO | None = None) -> str:
    source = sys.stdin if stream is None else stream
    if source.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Repeat password: ") != first:
            raise AccountRefused("the passwords differ")
        return first
    return source.readline().rstrip("\r\n")


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountRefused(f"the password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise AccountRefused(f"the password is longer than {MAX_PASSWORD_LENGTH} characters")


def check_email(email: str) -> str:
    email = email.strip()
    local, at, domain = email.partition("@")
    if not at or not local or "." not in domain or len(email) > MAX_EMAIL_LENGTH or " " in email:
        raise AccountRefused(f"{email!r} is not an email address")
    return email


async def create_account(
    conn: asyncpg.Connection, email: str, name: str, password: str
) -> AccountOutput:
    email = check_email(email)
    name = name.strip()
    if not name or len(name) > MAX_NAME_LENGTH:
        raise AccountRefused(f"the name needs 1 to {MAX_NAME_LENGTH} characters")
    check_password(password)
    digest = await asyncio.to_thread(hash_password, password)
    account_id = uuid.uuid4()
    try:
        await conn.execute(
            "INSERT INTO accounts (id, email, name, password_hash) VALUES ($1, $2, $3, $4)",
            account_id,
            email,
            name,
            digest,
        )
    except asyncpg.UniqueViolationError:
        raise AccountRefused(
            f"an account with email {email} already exists; use `elova-mcp account set-password`"
        ) from None
    return AccountOutput(str(account_id), email, name)


async def set_password(conn: asyncpg.Connection, email: str, password: str) -> AccountOutput:
    check_password(password)
    digest = await asyncio.to_thread(hash_password, password)
    row = await conn.fetchrow(
        "UPDATE accounts SET password_hash = $2 WHERE lower(email) = lower($1)"
        " RETURNING id, email, name",
        email.strip(),
        digest,
    )
    if row is None:
        raise AccountRefused(f"no account with email {email}")
    # A new password ends every sign-in session of the account.
    await conn.execute("DELETE FROM signin_sessions WHERE account_id = $1", row["id"])
    return AccountOutput(str(row["id"]), row["email"], row["name"])


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env(need_key=False)
    try:
        password = read_password()
    except AccountRefused as err:
        return refuse(_PROG, str(err))

    async def command(conn: asyncpg.Connection) -> str:
        if args.action == "create":
            out = await create_account(conn, args.email, args.name, password)
        else:
            async with conn.transaction():
                out = await set_password(conn, args.email, password)
        return msgspec.json.encode(out).decode()

    return asyncio.run(run_on_database(_PROG, cfg.database_url, command))
