"""The negative control of ``exactlyonce chaos``, and the plain clients that read (and watch)
what a chaos run wrote, ours and the control's alike.

An audit that cannot fail proves nothing. So every chaos run is also run, under the same
fault schedule, against a plain at-least-once writer of the same records (a ``foreachBatch``
that writes each micro-batch with the destination's plain client and none of the protocol:
:mod:`.writer`, started as :mod:`.runner`), and that control must show duplicates; and both
destinations are read by clients the sinks do not use, in the mode where a second write
shows (:mod:`.reading`):

- :mod:`.target`: where records go (:class:`~.target.Target`), for our sink and the control;
- :mod:`.postgres`, :mod:`.redis` (with :mod:`.resp`, a raw RESP client), :mod:`.kafka`,
  :mod:`.elasticsearch`: per destination, the independent reader, the last committed epoch,
  the commit watch (the trigger of the kills aimed at the commit window) and the control's
  write of one task, found by :func:`~.clients.client`.
"""
