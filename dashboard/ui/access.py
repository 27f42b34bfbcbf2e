"""Who is looking (decision 0022): signed in or open, viewer or operator (:func:`current_access`), and the
sidebar's note saying so (:func:`access_note`). The rule itself is :mod:`dashboard.access`'s."""

from __future__ import annotations

import os
from dataclasses import dataclass

import streamlit as st

from dashboard import access
from dashboard.text import md
from streaming.schema.config import Config


@dataclass(frozen=True)
class Access:
    """Who is looking (decision 0022): whether sign-in is on, the signed-in user's claims, their role."""

    sign_in: bool  # Streamlit has [auth] secrets: nothing is shown before sign-in
    claims: dict[str, object] | None  # the ID token's claims once signed in
    role: str  # access.OPERATOR or access.VIEWER
    problem: str | None = None  # an invalid operator rule: everyone is a viewer, and every page says why
    shut: str | None = None  # why nothing is shown to anyone: sign-in asked for, but Streamlit was not given it

    @property
    def signed_out(self) -> bool:
        return self.sign_in and self.claims is None

    @property
    def operator(self) -> bool:
        return self.role == access.OPERATOR and self.problem is None and self.shut is None

    @property
    def who(self) -> str:
        claims = self.claims or {}
        return str(claims.get("email") or claims.get("name") or claims.get("sub") or "someone")


def current_access() -> Access:
    """This session's access: ``[auth]`` in Streamlit's secrets turns sign-in on (``wm-dashboard`` writes it from
    ``DASHBOARD_OIDC_*``); the operator rule is ``DASHBOARD_OPERATORS_*``. Fails closed: sign-in asked for in the
    environment but absent from Streamlit shuts the dashboard, an invalid rule leaves nobody an operator."""
    try:
        sign_in = "auth" in st.secrets
    except FileNotFoundError:  # no secrets file at all (StreamlitSecretNotFoundError is one)
        sign_in = False
    user = st.user.to_dict() if sign_in else {}
    claims = {k: v for k, v in user.items() if k not in ("is_logged_in", "tokens")} if user.get("is_logged_in") \
        else None
    shut = problem = None
    try:
        asked = Config.sign_in_from(os.environ) is not None
    except access.AccessError:  # some of it set, not all: asked for (wm-dashboard refuses to start so)
        asked = True
    if not sign_in and asked:
        shut = ("Sign-in is configured (`DASHBOARD_OIDC_*`) but this dashboard was started without it, so it shows "
                "nothing: start it with `wm-dashboard` (the Procfile does), which hands Streamlit the `[auth]` "
                "secrets.")
    try:
        operators = Config.operators_from(os.environ)
    except access.AccessError as exc:
        operators, problem = access.Operators(), f"Nobody is an operator: {exc}."
    return Access(sign_in, claims, access.role(claims, operators, sign_in), problem, shut)


def access_note(acc: Access) -> None:
    """Under the sidebar's controls: who is signed in and as what, with a way out; or that the dashboard is open."""
    with st.sidebar:
        if acc.problem:
            st.warning(acc.problem)
        if not acc.sign_in:
            also = "and change what it offers to change" if acc.operator else "(changes need an operator: sign-in)"
            st.caption(f":material/lock_open: **Open to anyone who reaches this address**: no sign-in is configured, "
                       f"so anyone can see every page {also}. Docs: operations, *Sign-in and roles*.")
            return
        st.caption(f":material/account_circle: Signed in as {md(acc.who)} · **{acc.role}**")
        st.button("Sign out", key="sign_out", icon=":material/logout:", on_click=st.logout)
