"""The `tracekit` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tracekit` and `python -m tracekit`."""
    parser = argparse.ArgumentParser(prog="tracekit", description="See what reverse-mode autodiff keeps in memory.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="trace the sigmoid neuron y = sigmoid(w*x - 0.5) and draw it",
        description="Trace y = sigmoid(w*x + b) on the real PyTorch tape, run an observed backward, "
        "print the residuals with their free points and write the drawing as SVG.",
    )
    demo.add_argument("--x", type=float, default=1.0, help="input x (default 1.0)")
    demo.add_argument("--w", type=float, default=2.0, help="weight w (default 2.0)")
    demo.add_argument("--b", type=float, default=-0.5, help="bias b (default -0.5)")
    demo.add_argument("--out", default="tracekit-demo.svg", help="where to write the SVG (default ./tracekit-demo.svg)")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return _demo(args.x, args.w, args.b, args.out)


def _demo(x_value: float, w_value: float, b_value: float, out: str) -> int:
    import torch

    import tracekit as tk

    x = torch.tensor(x_value, requires_grad=True)
    w = torch.tensor(w_value, requires_grad=True)
    with tk.capture() as cap:
        z = w * x + b_value
        y = torch.sigmoid(z)
    tr = cap.trace(y)
    tr.backward()
    print(f"sigmoid neuron: x={x_value:g}, w={w_value:g}, b={b_value:g}")
    print(
        f"z = w*x + b = {z.item():.4f}   y = sigmoid(z) = {y.item():.4f}   "
        f"dy/dx = {x.grad.item():.4f}   dy/dw = {w.grad.item():.4f}"
    )
    print()
    print(tr.text())
    try:
        svg = tr.svg()
    except tk.TracekitError as err:
        print(f"\ncould not draw: {err}", file=sys.stderr)
        return 1
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(svg)
    print(f"\ndrawing written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
