"""Network fronts over a Log: the Redis protocol (resp.py)."""
