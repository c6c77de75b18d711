"""Least-slack-first with a token budget: a complete slolab policy in one file."""

from slolab.sim import Batch


class LeastSlackFirst:
    """Least slack first: each iteration serves the requests closest to missing their next
    token's deadline, within a budget of tokens per iteration."""

    def __init__(self, token_budget: int = 512) -> None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.token_budget = token_budget

    def start(self, instance, seed: int) -> None:
        """No state to reset: the rule makes no random choice."""

    def next_batch(self, server) -> Batch:
        """Decode tokens first (one token each), then prefill chunks, least slack first."""
        now = server.now

        def slack(r: int) -> float:
            return server.next_token_deadline(r) - now

        left = self.token_budget
        if server.max_batch_tokens:
            left = min(left, server.max_batch_tokens)
        seqs = server.max_batch_size
        decode: list[int] = []
        for r in sorted(server.decoding, key=slack):
            if left < 1 or len(decode) >= seqs:
                break
            decode.append(r)
            left -= 1
        # admit a request only when its prompt and every output token fit beside the peak
        # memory of those admitted, so memory never runs out
        running = (*server.prefilling, *server.decoding)
        free_kv = server.kv_capacity_tokens - sum(
            server.prompt(r) + server.output(r) for r in running
        )
        prefill: list[tuple[int, int]] = []
        for r in sorted((*server.prefilling, *server.waiting), key=slack):
            if left < 1 or len(decode) + len(prefill) >= seqs:
                break
            if r not in running:
                if server.prompt(r) + server.output(r) > free_kv:
                    continue
                free_kv -= server.prompt(r) + server.output(r)
            chunk = min(server.remaining_prefill(r), left)
            prefill.append((r, chunk))
            left -= chunk
        # decoding every running request and nothing else: the same batch until a request
        # finishes or arrives, so the engine may fast-forward it
        repeat = not prefill and len(decode) == len(server.decoding)
        return Batch(prefill=prefill, decode=decode, repeat=repeat)
