"""How the stack's processes stop: on a request (:mod:`.signals`) and with their parent (:mod:`.children`).
Standard library only; any floor may use it."""
