"""Judges: turn what a host reported (the preflight facts, the verification collection)
into checks against the profile. Pure functions over data; `checks` is the verdict type
they all return."""
