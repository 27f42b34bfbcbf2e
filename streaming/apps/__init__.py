"""The commands: the job, replay, the event generator and its control.
"""
