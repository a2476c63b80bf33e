"""The header line of squeue's default table (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D
%R``), which ``tqueue`` prints above the rows the daemon renders. Alone in a module
without imports, so that ``tqueue``'s quick path (:mod:`bridge.cli.quick`) prints it
without loading the cell formatting (:mod:`bridge.queue_cells`, which re-exports it)."""

from __future__ import annotations

__all__ = ["HEADER"]

HEADER = (f"{'JOBID':>18} {'PARTITION':>9} {'NAME':>8} {'USER':>8} {'ST':>2} {'TIME':>10} "
          f"{'NODES':>6} NODELIST(REASON)\n")
