"""What the pure core must not touch, and how the stack's processes stop: the wall clock (:mod:`.clock`), a
requested stop (:mod:`.signals`), children that stop with their parent (:mod:`.children`). Standard library
only; any floor may use it."""
