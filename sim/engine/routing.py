"""Routing: arrivals and KV transfers reach a server through their router, or wait held in
the central queue of their side until a router places them at a retry point or a server pulls
them; a server's policy forwards a waiting request to another server of its role.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from slolab.sim.engine.servers import Server, ServerState, state_of
from slolab.sim.engine.state import EngineCore
from slolab.sim.policy import HOLD, PolicyError, Router


class Routing(EngineCore):
    """Arrivals, KV transfers, held requests and central queues (a part of the engine)."""

    def _arrive(self, r: int) -> None:
        views = self.entry_views
        if self._unservable_entry is not None and self._refused_unservable(
            self._unservable_entry, r
        ):
            return
        if self.router is None:
            if not views:
                raise PolicyError(
                    f"t={self.now}: request {r} arrived but no server accepts new requests "
                    "(every entry server is drained)"
                )
            k = 0 if len(views) == 1 else r % len(views)
        elif not views and getattr(self.router, "central", False):
            self._hold(r, decode=False)
            return
        else:
            k = self._route(self.router, views, r, "")
            if k == HOLD:
                self._hold(r, decode=False)
                return
        self._place(state_of(views[k]), r)

    def _place(self, server: ServerState, r: int) -> None:
        """Request ``r`` joins ``server`` (its entry server) now."""
        if self.warm is not None and self.warm[0][r]:
            self._place_warm(server, r)
        elif self._too_large(server, r):
            return
        else:
            server.waiting.append(r)
            server.waiting_t = None
        self.routed[r] = self.now
        if server.role == "prefill":
            self.prefill_server_of[r] = server.id
        else:
            self.server_of[r] = server.id
            self.prefill_server_of[r] = server.id
        self._wake(server)

    def _too_large(self, server: ServerState, r: int) -> bool:
        """Reject request ``r`` (True) when ``server`` could never hold it (nor, disaggregated,
        any decode pool)."""
        need = self.kv_needed(server.role, r)
        if need <= server.kv_capacity:
            if server.role != "prefill" or self.kv_needed("decode", r) <= self.decode_kv_max:
                return False
        self.rejected[r] = True
        self.rejected_kv[r] = True
        self.rejected_at[r] = self.now
        return True

    def _fits_anywhere(self, r: int) -> bool:
        """Whether some pool of the entry side could hold request ``r`` (and, disaggregated,
        some decode pool after it)."""
        for p in self.pools:
            if p.role == "decode" or self.kv_needed(p.role, r) > int(p.kv_capacity_tokens):  # type: ignore[arg-type]
                continue
            if p.role != "prefill" or self.kv_needed("decode", r) <= self.decode_kv_max:
                return True
        return False

    def _too_large_anywhere(self, r: int) -> bool:
        """Reject a held request ``r`` (True) when no pool of its side could ever hold it."""
        if self._fits_anywhere(r):
            return False
        self.rejected[r] = True
        self.rejected_kv[r] = True
        self.rejected_at[r] = self.now
        return True

    def _refused_unservable(self, ask: Callable[[int], str | None], r: int) -> bool:
        """Reject request ``r`` now (True) when its router's ``unservable`` hook (``ask``)
        gives a reason no server of its side could ever serve it; the reason is kept
        (``Outcome.info["unservable"]``). An arrival no pool of its side could hold is
        rejected for its KV (``rejected_kv``) first, the router asked nothing: such a router
        keeps queues, and would count a request the engine then never holds. A warm-started
        request is running already: never."""
        if self.warm is not None and self.warm[0][r]:
            return False
        if ask is self._unservable_entry and self._too_large_anywhere(r):
            return True
        why = ask(r)
        if why is None:
            return False
        self.rejected[r] = True
        self.rejected_at[r] = self.now
        self.unservable[r] = str(why)
        return True

    def _route(self, router: Router, views: tuple[Server, ...], r: int, kind: str) -> int:
        """The index in ``views`` that ``router`` picks for request ``r`` (or HOLD); PolicyError
        when it is out of range (``kind``: "" or "decode ", for the message)."""
        k = router.route(r, views, self.now)
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            made = type(router)
            raise PolicyError(
                f"{kind}router {made.__module__}:{made.__qualname__} returned {k!r} for request "
                f"{r} at t={self.now}, expected a server index in 0..{len(views) - 1} or HOLD "
                f"({HOLD})"
            )
        k = int(k)
        if k == HOLD:
            return HOLD
        if not 0 <= k < len(views):
            if not views:
                raise PolicyError(
                    f"t={self.now}: {kind}request {r} arrived but no server accepts new requests "
                    f"(every {kind or 'entry '}server is drained); the router chose {k}"
                )
            raise PolicyError(
                f"{kind}router chose server {k} for request {r}; "
                f"{kind}servers are 0..{len(views) - 1}"
            )
        return k

    # -- held requests -----------------------------------------------------------------------
    def _retry(self) -> None:
        """Offer the held requests to their routers again (a retry point was reached)."""
        self._retry_due = False
        router, decode_router = self.router, self.decode_router
        if self.held_entry and router is not None and not getattr(router, "central", False):
            self._offer(router, self.held_entry, self.entry_views, decode=False)
        if (
            self.held_decode
            and decode_router is not None
            and not getattr(decode_router, "central", False)
        ):
            self._offer(decode_router, self.held_decode, self.decode_views, decode=True)

    def _offer(
        self, router: Router, held: list[int], views: tuple[Server, ...], decode: bool
    ) -> int:
        """Offer ``held`` to ``router`` (its ``dispatch`` if it has one); place what it routes.
        Returns how many were placed."""
        kind = "decode " if decode else ""
        place = self._place_decode if decode else self._place
        dispatch = getattr(router, "dispatch", None)
        if dispatch is None:
            # one at a time, each placed before the next is offered (the router sees it)
            placed = 0
            for r in list(held):
                k = self._route(router, views, r, kind)
                if k != HOLD:
                    held.remove(r)
                    self._central_t[int(decode)] = None
                    place(state_of(views[k]), r)
                    placed += 1
            return placed
        pairs = [(int(r), int(k)) for r, k in dispatch(tuple(held), views, self.now)]
        if not pairs:
            return 0
        waiting = set(held)
        for r, k in pairs:
            if r not in waiting:
                raise PolicyError(
                    f"t={self.now}: {kind}router dispatched request {r}, which it does not hold"
                )
            if not 0 <= k < len(views):
                raise PolicyError(
                    f"{kind}router chose server {k} for request {r}; "
                    f"{kind}servers are 0..{len(views) - 1}"
                )
            waiting.discard(r)
        held[:] = [r for r in held if r in waiting]
        self._central_t[int(decode)] = None
        for r, k in pairs:
            place(state_of(views[k]), r)
        return len(pairs)

    def _place_warm(self, server: ServerState, r: int) -> None:
        """Admit a warm-started request as it was when the run began (see warm_start_state)."""
        _, remaining, generated = self.warm  # type: ignore[misc]
        if server.role != "mixed":
            raise ValueError(
                f"request {r} is warm-started (running); only colocated mode supports that"
            )
        g = int(generated[r])
        if self.given is not None and self.given[r]:
            raise ValueError(
                f"warm-started request {r} is running and has cached_tokens "
                f"{int(self.given[r])}: a running request's KV is its own, give it 0"
            )
        self.prefilled[r] = self.prompt[r] - remaining[r]
        self.generated[r] = g
        self.held[r] = self.prefilled[r] + g
        self.token_times[self.offsets[r] : self.offsets[r] + g] = np.nan
        self.first_scheduled[r] = self.now
        used = server.kv - server.kv_shared
        if used + int(self.held[r]) > server.kv_capacity:
            raise ValueError(
                f"warm-started request {r} holds {int(self.held[r])} KV tokens; server {server.id} "
                f"has {server.kv_capacity - used} free"
            )
        server.kv += int(self.held[r])
        if self.prefix is not None:
            # admitted before the run: its prefill goes on from where the snapshot left it
            self.prefix.admitted[r] = True
        if remaining[r] > 0:
            server.prefilling.append(r)
            server.prefilling_t = None
        else:
            self.prefill_done[r] = np.nan
            server.decoding.append(r)
            server.decoding_kv += int(self.held[r])
            server.decoding_changed()

    def _arrive_decode(self, r: int) -> None:
        views = self.decode_views
        if self._unservable_decode is not None and self._refused_unservable(
            self._unservable_decode, r
        ):
            return
        need = self.kv_needed("decode", r)
        if self.decode_router is None:
            fits = [j for j in range(len(views)) if state_of(views[j]).kv_capacity >= need]
            if not fits:
                raise PolicyError(
                    f"t={self.now}: no decode server accepting new requests can hold request {r} "
                    f"({need} KV tokens)"
                )
            k = min(fits, key=lambda j: (views[j].load, j))
        else:
            k = self._route(self.decode_router, views, r, "decode ")
            if k == HOLD:
                self._hold(r, decode=True)
                return
        self._place_decode(state_of(views[k]), r)

    def _place_decode(self, server: ServerState, r: int) -> None:
        """Request ``r``, its prefill done, joins decode server ``server`` now."""
        need = self.kv_needed("decode", r)
        if need > server.kv_capacity:
            raise PolicyError(
                f"decode router chose server {server.id} (KV capacity {server.kv_capacity}) for "
                f"request {r}, which needs {need} KV tokens"
            )
        self.transfer_done[r] = self.now
        self.server_of[r] = server.id
        server.waiting.append(r)
        server.waiting_t = None
        self._wake(server)

    # -- central queues ------------------------------------------------------------------
    def _hold(self, r: int, decode: bool) -> None:
        """Keep request ``r`` in its side's central queue (an entry request no pool could ever
        hold is rejected instead); with a ``central`` router wake that side's servers (each may
        pull it)."""
        if not decode and self._too_large_anywhere(r):
            return
        side = int(decode)
        self.central[side].append(r)
        self._central_t[side] = None
        if getattr(self.decode_router if decode else self.router, "central", False):
            for view in self.decode_views if decode else self.entry_views:
                self._wake(state_of(view))

    def _pull(self, server: ServerState, r: int) -> None:
        """Move request ``r`` from the central queue of ``server``'s side to the end of its
        queue (the request is routed, or for a decode server transferred, now)."""
        now = self.now
        decode = server.role == "decode"
        queue = self.central[int(decode)]
        try:
            queue.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: it is not held on the "
                f"{'decode' if decode else 'entry'} side"
            ) from None
        self._central_t[int(decode)] = None
        if not server.accepting:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: the server does not "
                "accept new requests"
            )
        need = self.kv_needed(server.role, r)
        if need > server.kv_capacity:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: it needs {need} KV tokens, "
                f"the server holds {server.kv_capacity}"
            )
        server.waiting.append(r)
        server.waiting_t = None
        # the other servers of this side see a shorter central queue from now: a window in
        # progress there is cut after its iteration in progress (its policy may read the queue)
        for view in self.decode_views if decode else self.entry_views:
            other = state_of(view)
            if other.window is not None and other is not server:
                self._truncate(other)
        if decode:
            self.transfer_done[r] = now
            self.server_of[r] = server.id
            return
        self.routed[r] = now
        self.prefill_server_of[r] = server.id
        if server.role != "prefill":
            self.server_of[r] = server.id

    def _forward(self, server: ServerState, r: int, target: int) -> None:
        now = self.now
        if not 0 <= target < len(self.servers) or target == server.id:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}"
            )
        dest = self.servers[target]
        if dest.role != server.role:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to a {dest.role} server"
            )
        if not dest.accepting:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}: "
                "it does not accept new requests"
            )
        if self.kv_needed(dest.role, r) > dest.kv_capacity:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}: "
                f"it needs {self.kv_needed(dest.role, r)} KV tokens, the server holds "
                f"{dest.kv_capacity}"
            )
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r}: not waiting here"
            ) from None
        server.waiting_t = None
        dest.waiting.append(r)
        dest.waiting_t = None
        self.routed[r] = now
        self.forward_log.append((r, server.id, target, now))
        self.server_of[r] = target
        if self.prefill_server_of[r] == server.id:
            self.prefill_server_of[r] = target
        self._wake(dest)
