"""The work the harness writes before a worker starts, and where a system keeps its roster.

Every case database starts with two intake tables, whatever the system under test: the run
requests (``run_requests``: what the outside world asked for) and the roster (``roster``: who
should hear about each topic *now*). ``jobs(config)`` reads them for a worker built with
``harness.usersystem``; the reference worker reads them itself. They are declared here, on a
metadata of their own (``IntakeBase.metadata``), so a system's own schema may copy them into
its metadata (``Table.to_metadata``) and create everything in one ``create_all``.

A ``Roster`` says how a system's roster is stored and changed. The harness seeds it before a
worker starts and the ``roster_change`` fault changes it between a crash and the restart;
the default, ``INTAKE_ROSTER``, is the intake table. A system that reads its roster from
elsewhere gives ``System(roster=...)`` a ``Roster`` subclass; ``roster=None`` says it has
none, and a plan with ``roster_change`` is refused before anything runs.
"""

from __future__ import annotations

from sqlalchemy import Engine, String, Text, delete, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

__all__ = [
    "INTAKE_ROSTER",
    "IntakeBase",
    "Roster",
    "RosterEntry",
    "RunRequest",
    "create_intake_tables",
]


class IntakeBase(DeclarativeBase):
    """The harness's own intake tables (and nothing else) live on this metadata."""


class RunRequest(IntakeBase):
    """Work the outside world asked for; the harness writes these before a worker starts."""

    __tablename__ = "run_requests"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    topic: Mapped[str] = mapped_column(String(64))
    input_payload: Mapped[str] = mapped_column(Text)


class RosterEntry(IntakeBase):
    """Who should hear about a topic *now*; may change after a run commits."""

    __tablename__ = "roster"
    topic: Mapped[str] = mapped_column(String(64), primary_key=True)
    destination: Mapped[str] = mapped_column(String(200), primary_key=True)


def create_intake_tables(engine: Engine) -> None:
    """Create the intake tables (only those) on a case's fresh database."""
    IntakeBase.metadata.create_all(engine)


class Roster:
    """How a system's roster is stored and changed: by default, the intake table ``roster``.

    Every method runs inside the caller's transaction (``session``), so a change of several
    topics is one commit. Override all four to keep the roster somewhere else.
    """

    def destinations(self, session: Session, topic: str) -> list[str]:
        """The topic's destinations now, sorted."""
        return sorted(
            session.scalars(select(RosterEntry.destination).where(RosterEntry.topic == topic))
        )

    def add(self, session: Session, topic: str, destination: str) -> None:
        session.add(RosterEntry(topic=topic, destination=destination))

    def remove(self, session: Session, topic: str, destination: str) -> None:
        session.execute(
            delete(RosterEntry).where(
                RosterEntry.topic == topic, RosterEntry.destination == destination
            )
        )

    def rename(self, session: Session, topic: str, old: str, new: str) -> None:
        """Respell one destination in place (the ``*_nfd`` set-up of ``roster_change``)."""
        session.execute(
            update(RosterEntry)
            .where(RosterEntry.topic == topic, RosterEntry.destination == old)
            .values(destination=new)
        )


#: the roster every system has unless it declares another: the intake table ``roster``
INTAKE_ROSTER = Roster()
