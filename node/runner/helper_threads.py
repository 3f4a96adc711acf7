"""Work a node's round hands to helper threads, so that it overlaps generating and training.
The run loop (``join.run_node``) makes one ``HelperThreads`` and passes it to every round (``Node.run_round``);
without one (tests, lockstep experiments) a round does all of it itself, in order.

- publishing: the round's batch is encoded and handed to the transport on the publisher's thread while the
  round goes on; the round waits for it after its step, so the round's report includes it;
- peers' texts: the peers' batches that arrived before the round generates are taken from the transport
  then (``Intake.take_early``), and their completions decoded on the decoder's thread while the generator runs;
  the round waits for them before it decodes its own completions (the tokenizer is used by one thread at a
  time). The round trains on them first, then on the batches that arrive later: the transport's order. The rewards are
  computed in the round itself: a task may rely on the main thread (math_verify's timeout). Taking them
  before generating frees their peers' inbox quota a little earlier than the collect would. Taking arrivals
  again during the generation (every 20 ms) gains nothing measurable.

Both give the same results as doing the work in place: the same bytes published, the same texts.
"""

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from ftis.node.intake.scoring import Texts, batch_key, decode_groups
from ftis.node.records.writer import BackgroundWriter
from ftis.node.swarm.transport import ReceivedBatch


class HelperThreads:
    def __init__(self) -> None:
        self.publisher = BackgroundWriter(name="ftis-publisher")
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ftis-decoder")

    def decode_ahead(self, received: Sequence[ReceivedBatch], tokenizer: object, vocab_size: int) -> "Future[Texts]":
        """Decode the completions of ``received`` on the decoder's thread (``decode_groups``)."""
        return self._decoder.submit(_decode_all, list(received), tokenizer, vocab_size)

    def close(self) -> None:
        """Publish what was handed over, stop both threads; raises a failed publish's error not raised yet."""
        try:
            self.publisher.close()
        finally:
            self._decoder.shutdown(wait=True)


def _decode_all(received: list[ReceivedBatch], tokenizer: object, vocab_size: int) -> Texts:
    return {batch_key(item): decode_groups(item.batch, tokenizer, vocab_size) for item in received}
