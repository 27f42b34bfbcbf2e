"""Against a real redis-server: the guarded commits, ACL users, the batch cap, control, the generator, the online
view.
"""
