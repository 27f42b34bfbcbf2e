"""The lab's control plane on real Redis: the control hash and its command, and the generator following it."""
