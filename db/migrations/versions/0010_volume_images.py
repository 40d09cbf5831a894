"""images may be volumes (CT series, multi-frame DICOM, NIfTI)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

* ``images.kind``: ``film`` (one 2-D image file, as every image before 0010) or ``volume``
  (a folder written by ``backend.imaging.volume_store``; ``format`` is ``volume`` and
  ``meta["volume"]`` holds its shape and voxel spacing). Every existing row becomes ``film``.
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=False,
                                      server_default="film"))


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_column("kind")
