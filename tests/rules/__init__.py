"""The pure rules and the source's parsing as tables: windows, the online view, events, the late record, the
commit plan.
"""
