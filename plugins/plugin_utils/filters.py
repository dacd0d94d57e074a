"""What the kit's filter plugins share: the kit's errors turned into Ansible's."""

from __future__ import annotations

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from .errors import FleetError


def guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the kit's errors into Ansible filter errors carrying the same message."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except FleetError as error:
            raise AnsibleFilterError(str(error)) from None
    wrapper.__doc__ = function.__doc__
    return wrapper
