"""``AsyncClient``'s calls of the durable workflow routes (docs/durable.md): callers start, inspect, signal,
cancel and wait for workflows; ``querator.durable``'s workers claim and append."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from querator.client._arguments import Duration, go_duration
from querator.client._caller import Caller
from querator.client._transport import http_timeout_s
from querator.wire import messages as m
from querator.wire.search import SearchValue, search_texts


class WorkflowCalls(Caller):
    """The workflow routes; a base of ``AsyncClient``, whose ``call`` sends them."""

    async def start_workflow(
        self,
        workflow_id: str,
        name: str,
        queue: str,
        input: bytes = b"",
        *,
        encoding: str = "",
        parent_id: str = "",
        parent_seq: int = 0,
        timeout: Duration | None = None,
        app_version: str = "",
        search_attributes: Mapping[str, SearchValue] | None = None,
    ) -> m.WorkflowsStartResponse:
        """Starts the workflow ``name`` as ``workflow_id`` with its activations in ``queue``, a run of
        ``app_version`` ("": any worker's); a workflow of that id that exists already is returned as it
        is (``created`` False). ``timeout``: past it (from now, at least 1s) the workflow fails with
        ``WorkflowTimeout``. ``search_attributes``: its first ones (``querator.wire.search``)."""
        msg = m.WorkflowsStartRequest(
            workflow_id=workflow_id,
            name=name,
            queue_name=queue,
            input=input,
            encoding=encoding,
            parent_id=parent_id,
            parent_seq=parent_seq,
            timeout="" if timeout is None else go_duration(timeout),
            app_version=app_version,
            search_attributes=search_texts(search_attributes or {}),
        )
        return await self.call("/v1/workflows.start", msg, m.WorkflowsStartResponse, idempotent=True)

    async def workflow_info(
        self, workflow_id: str, *, namespace: str = "", after: int = 0, limit: int = 0
    ) -> m.WorkflowInfo:
        """The workflow with a page of its journal, and its signals: the entries after seq ``after``
        (0: from the run's first), at most ``limit`` (0: the server's most, 10,000; fewer past 8 MiB of
        values). ``namespace``: the one of the workflow's queue, where its id is ("": ``_system``), as in
        every call naming a workflow here."""
        msg = m.WorkflowsInfoRequest(workflow_id=workflow_id, namespace=namespace, after=after, limit=limit)
        return await self.call("/v1/workflows.info", msg, m.WorkflowInfo, idempotent=True)

    async def workflow_journal(
        self, workflow_id: str, *, namespace: str = "", limit: int = 0
    ) -> m.WorkflowInfo:
        """The workflow with its whole journal, read a page of ``workflow_info`` (of ``limit``) at a time
        until a page is empty (one after the other: a running workflow may move between them)."""
        info = await self.workflow_info(workflow_id, namespace=namespace, limit=limit)
        page = info.entries
        while page:
            after = page[-1].seq
            page = (
                await self.workflow_info(workflow_id, namespace=namespace, after=after, limit=limit)
            ).entries
            info.entries += page
        return info

    async def list_workflows(
        self,
        status: str = "",
        *,
        pivot: str = "",
        limit: int = 0,
        namespace: str = "",
        app_version: str = "",
        search: Mapping[str, SearchValue] | None = None,
    ) -> list[m.WorkflowInfo]:
        """Workflows of ``namespace`` (of ``status``: running, completed, failed, cancelled; "" any; of
        ``app_version``, "" any; holding every search attribute of ``search``, equal as text) by id from
        ``pivot``."""
        msg = m.WorkflowsListRequest(
            status=status,
            pivot=pivot,
            limit=limit,
            namespace=namespace,
            app_version=app_version,
            search=search_texts(search or {}),
        )
        reply = await self.call("/v1/workflows.list", msg, m.WorkflowsListResponse, idempotent=True)
        return reply.workflows

    async def signal_workflow(
        self,
        workflow_id: str,
        name: str,
        payload: bytes = b"",
        *,
        signal_id: str | None = None,
        namespace: str = "",
    ) -> None:
        """Sends the signal ``name``; kept until the workflow waits for it. A signal id (made here unless
        given) makes a send tried again after a lost reply count once."""
        msg = m.WorkflowsSignalRequest(
            workflow_id=workflow_id,
            name=name,
            payload=payload,
            signal_id=signal_id or secrets.token_hex(12),
            namespace=namespace,
        )
        await self.call("/v1/workflows.signal", msg, m.Reply, idempotent=True)

    async def update_workflow(
        self,
        workflow_id: str,
        name: str,
        payload: bytes = b"",
        *,
        update_id: str,
        timeout: Duration = "30s",
        namespace: str = "",
    ) -> m.WorkflowsUpdateResponse:
        """Sends the update ``name`` (``payload``: its handler's arguments, in the workflow's encoding) and
        waits for the answer the workflow's turn records, at most ``timeout`` (at most 15m): ``state``
        done or error, or pending once ``timeout`` passed (the update stays recorded; a call with the
        same ``update_id`` waits for it again, and a send tried again after a lost reply counts once).
        The caller validates it first (``querator.durable.Durable.update`` does, docs/adr/0060).

        Raises:
            InvalidOption: the workflow is finished, or ended before it took the update.
        """
        request_timeout = go_duration(timeout)
        msg = m.WorkflowsUpdateRequest(
            workflow_id=workflow_id,
            name=name,
            payload=payload,
            update_id=update_id,
            request_timeout=request_timeout,
            namespace=namespace,
        )
        seconds = http_timeout_s(request_timeout)
        return await self.call(
            "/v1/workflows.update", msg, m.WorkflowsUpdateResponse, seconds=seconds, idempotent=True
        )

    async def cancel_workflow(self, workflow_id: str, *, namespace: str = "") -> None:
        """Asks a workflow to stop: its compensations run and it ends cancelled, with its children."""
        msg = m.WorkflowsCancelRequest(workflow_id=workflow_id, namespace=namespace)
        await self.call("/v1/workflows.cancel", msg, m.Reply, idempotent=True)

    async def resume_workflow(self, workflow_id: str, *, namespace: str = "") -> None:
        """Runs a workflow that failed for its code (non-determinism, ``resumable``) again, from its
        journal, with the code the workers have now.

        Raises:
            Conflict: it did not fail that way, or is a child workflow.
        """
        msg = m.WorkflowsResumeRequest(workflow_id=workflow_id, namespace=namespace)
        await self.call("/v1/workflows.resume", msg, m.Reply)

    async def fork_workflow(
        self, workflow_id: str, from_step: int, *, new_workflow_id: str = "", namespace: str = ""
    ) -> m.WorkflowsStartResponse:
        """Starts a new workflow with the input of ``workflow_id`` and its journal entries before seq
        ``from_step``: it replays those and runs from ``from_step`` on; the original is left as it is.
        ``new_workflow_id`` (made here unless given) makes a fork tried again after a lost reply count once.

        Raises:
            InvalidOption: ``from_step`` is past the journal's end, after a pending entry or inside a
                gather (``from step is invalid``).
        """
        msg = m.WorkflowsForkRequest(
            workflow_id=workflow_id,
            namespace=namespace,
            new_workflow_id=new_workflow_id or secrets.token_hex(16),
            from_step=from_step,
        )
        return await self.call("/v1/workflows.fork", msg, m.WorkflowsStartResponse, idempotent=True)

    async def terminate_workflow(self, workflow_id: str, reason: str = "", *, namespace: str = "") -> None:
        """Ends a running workflow now, failed with ``Terminated: <reason>``, with no worker: its code and
        compensations do not run; its unfinished children are terminated too."""
        msg = m.WorkflowsTerminateRequest(workflow_id=workflow_id, reason=reason, namespace=namespace)
        await self.call("/v1/workflows.terminate", msg, m.Reply, idempotent=True)

    async def workflow_result(
        self, workflow_id: str, timeout: Duration = "30s", *, namespace: str = ""
    ) -> m.WorkflowInfo:
        """The workflow once it finished, or still running when ``timeout`` (at most 15m) passed."""
        request_timeout = go_duration(timeout)
        msg = m.WorkflowsResultRequest(
            workflow_id=workflow_id, request_timeout=request_timeout, namespace=namespace
        )
        seconds = http_timeout_s(request_timeout)
        return await self.call("/v1/workflows.result", msg, m.WorkflowInfo, seconds=seconds, idempotent=True)

    async def claim_workflow(
        self, workflow_id: str, claim_timeout: Duration = "30s", *, namespace: str = "", app_version: str = ""
    ) -> m.WorkflowsClaimResponse:
        """Makes this caller the one worker that advances the workflow (``outcome`` claimed), unless
        another claim holds (busy), it finished, or it is a run of another ``app_version`` than this
        caller's (other_version; "": any run). Not tried again: a lost reply's claim holds until its
        timeout."""
        msg = m.WorkflowsClaimRequest(
            workflow_id=workflow_id,
            claim_timeout=go_duration(claim_timeout),
            namespace=namespace,
            app_version=app_version,
        )
        return await self.call("/v1/workflows.claim", msg, m.WorkflowsClaimResponse)

    async def append_workflow(self, msg: m.WorkflowsAppendRequest) -> m.WorkflowsAppendResponse:
        """Appends to the journal under a claim's fence (409 ``Conflict`` once another worker claimed it),
        or records results from outside a claim (fence 0, tried again: the first result recorded wins)."""
        return await self.call(
            "/v1/workflows.append", msg, m.WorkflowsAppendResponse, idempotent=msg.fence == 0
        )
