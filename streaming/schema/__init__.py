"""What crosses a process, pure: the event wire format and its parser, the Redis key schema, the configuration, the
lab lanes, time formats.
"""
