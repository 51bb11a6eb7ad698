"""Interactive explorers for the lessons (ipywidgets). Thin by design.

Each widget's logic is a plain function that the tests call directly; the widget only wires
controls to it and shows the result through widget values or ``Output.append_*``, so tests can
set a control's ``value`` and assert on what the widget shows, headless.

One module per lesson's widget; this package re-exports them.
"""
from .setup import MatmulRaceExplorer, matmul_race_explorer  # lesson 00
from .formats import FormatExplorer, NumberLine, format_explorer, number_line_view  # lesson 01
from .bench import RooflineExplorer, roofline_explorer  # lesson 06
from .memory import MemoryExplorer, memory_explorer  # lesson 07
from .autocast import AutocastExplorer, autocast_explorer, explain_op  # lesson 05
from .debug import LayerExplorer, explore_layers, layer_explorer  # lesson 09
from .scaler import ScaleExplorer, scale_explorer, simulate_scale  # lesson 04
from .loss_scale import LossScaleExplorer, loss_scale_explorer, loss_scale_summary  # lessons 02-03
from .study import StudyExplorer, study_explorer, study_view  # lesson 08
from .fp8 import Fp8ScalingExplorer, fp8_scaling_explorer, scaling_errors  # lesson 10
from .distributed import RankScaleExplorer, rank_scale_explorer, simulate_ranks  # lesson 11
from .optim import RoundingExplorer, rounding_explorer, rounding_walk  # lesson 12
from .compile import CastExplorer, cast_explorer, op_graph  # lesson 13
from .hf import FlagExplorer, flag_explorer, flag_text  # lesson 14
