"""The errors fake_providers raises on purpose.

Kept in their own module so the server side (which must not import ``requests``) and the
client side (which must not import werkzeug's server) can share them.
"""

from __future__ import annotations


class ProviderError(Exception):
    """Something about a fake provider is wrong: bad configuration or an unexpected reply."""


class ProviderStartError(ProviderError):
    """The provider process could not be started; the message carries its stderr."""
