"""The pure rules and the source's parsing as tables: windows, presence, events, the late record, the commit plan.
"""
