"""The lab's one error type: a component that would not start or become ready."""

from __future__ import annotations


class LabError(RuntimeError):
    """The lab could not be brought up (or down); the message names the component and its log."""
