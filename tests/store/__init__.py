"""Against a real redis-server: the guarded commits, ACL users, control, the generator, the online
view.
"""
