"""Shared fixtures. ``tiny_kg`` is a hand-written 14-entity graph for unit tests; the real
curated graph is ``data/kg.json`` (``real_kg``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from library.graph.kg import KnowledgeGraph, load_kg

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs ``-n``), each of the N test processes gets its share
    of the cores: torch's default of every core in every process oversubscribes them, and its
    OpenMP threads spin while they wait. Set before torch loads; the runs tests launch inherit it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        share = str(max(1, cores // workers))
        share = os.environ.setdefault("OMP_NUM_THREADS", share)  # a user's own setting stands
        os.environ.setdefault("MKL_NUM_THREADS", share)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(share))


TINY_KG = {
    "version": "test",
    "domain": "software-troubleshooting",
    "entities": [
        {"id": "TLSHandshakeError", "label": "TLS handshake error", "type": "symptom"},
        {"id": "ConnectionRefused", "label": "connection refused", "type": "symptom"},
        {"id": "HTTP502BadGateway", "label": "HTTP 502 bad gateway", "type": "symptom"},
        {"id": "ClockSkew", "label": "clock skew", "type": "cause"},
        {"id": "CertificateExpired", "label": "expired certificate", "type": "cause"},
        {"id": "ServiceDown", "label": "service down", "type": "cause"},
        {"id": "NTPDrift", "label": "NTP drift", "type": "cause"},
        {"id": "NTPSync", "label": "sync clocks with NTP", "type": "fix"},
        {"id": "RenewCertificate", "label": "renew the certificate", "type": "fix"},
        {"id": "RestartService", "label": "restart the service", "type": "fix"},
        {"id": "CheckCertificateChain", "label": "check the certificate chain", "type": "diagnostic"},
        {"id": "CheckClockOffset", "label": "check the clock offset", "type": "diagnostic"},
        {"id": "openssl", "label": "openssl", "type": "tool"},
        {"id": "chronyc", "label": "chronyc", "type": "tool"},
    ],
    "relations": [
        {"id": "caused_by", "label": "is caused by"},
        {"id": "leads_to", "label": "leads to"},
        {"id": "fixed_by", "label": "is fixed by"},
        {"id": "diagnosed_by", "label": "is diagnosed by"},
        {"id": "uses_tool", "label": "uses tool"},
        {"id": "prevented_by", "label": "is prevented by"},
    ],
    "edges": [
        {"src": "TLSHandshakeError", "rel": "caused_by", "dst": "ClockSkew"},
        {"src": "TLSHandshakeError", "rel": "caused_by", "dst": "CertificateExpired"},
        {"src": "TLSHandshakeError", "rel": "diagnosed_by", "dst": "CheckCertificateChain"},
        {"src": "HTTP502BadGateway", "rel": "caused_by", "dst": "ServiceDown"},
        {"src": "ConnectionRefused", "rel": "caused_by", "dst": "ServiceDown"},
        {"src": "ClockSkew", "rel": "fixed_by", "dst": "NTPSync"},
        {"src": "ClockSkew", "rel": "diagnosed_by", "dst": "CheckClockOffset"},
        {"src": "NTPDrift", "rel": "leads_to", "dst": "TLSHandshakeError"},
        {"src": "NTPDrift", "rel": "fixed_by", "dst": "NTPSync"},
        {"src": "CertificateExpired", "rel": "fixed_by", "dst": "RenewCertificate"},
        {"src": "CertificateExpired", "rel": "leads_to", "dst": "HTTP502BadGateway"},
        {"src": "ServiceDown", "rel": "leads_to", "dst": "ConnectionRefused"},
        {"src": "ServiceDown", "rel": "fixed_by", "dst": "RestartService"},
        {"src": "CheckCertificateChain", "rel": "uses_tool", "dst": "openssl"},
        {"src": "CheckClockOffset", "rel": "uses_tool", "dst": "chronyc"},
        {"src": "NTPSync", "rel": "uses_tool", "dst": "chronyc"},
        {"src": "RenewCertificate", "rel": "uses_tool", "dst": "openssl"},
        {"src": "ServiceDown", "rel": "prevented_by", "dst": "RestartService"},
    ],
}


@pytest.fixture
def tiny_kg_dict() -> dict:
    return json.loads(json.dumps(TINY_KG))


@pytest.fixture
def tiny_kg() -> KnowledgeGraph:
    return KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG)))


@pytest.fixture(scope="session")
def real_kg() -> KnowledgeGraph:
    return load_kg(REPO / "data" / "kg.json")


@pytest.fixture
def kg_file(tmp_path) -> Path:
    """The tiny graph written as a kg.json."""
    path = tmp_path / "kg.json"
    path.write_text(json.dumps(TINY_KG))
    return path


@pytest.fixture
def fixture_run(tmp_path, tiny_kg):
    """A synthetic run folder (tests/fixture_run.py) written with the run-log API."""
    from fixture_run import build_fixture_run

    return build_fixture_run(tmp_path / "runs", tiny_kg)
