"""Every rewrite rule, most specific first: the first rule that claims a token owns its site."""

from ddtree_patch.rules.allow_list import AllowList
from ddtree_patch.rules.argparse_flag import ArgparseFlag
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.builtins_help import BuiltinsHelp
from ddtree_patch.rules.call_arg import CallArg
from ddtree_patch.rules.choices import Choices
from ddtree_patch.rules.create_worker import CreateWorker
from ddtree_patch.rules.enum_member import EnumMember
from ddtree_patch.rules.flag_name import FlagName
from ddtree_patch.rules.equality import Equality
from ddtree_patch.rules.membership import Membership
from ddtree_patch.rules.predicate_call import PredicateCall
from ddtree_patch.rules.prose import Prose
from ddtree_patch.rules.predicate_def import PredicateDef
from ddtree_patch.rules.request_hook import RequestHook
from ddtree_patch.rules.server_arg_field import ServerArgField
from ddtree_patch.rules.validation_hook import ValidationHook
from ddtree_patch.rules.value import Value

RULES: tuple[Rule, ...] = (
    ValidationHook(),
    RequestHook(),
    CreateWorker(),
    EnumMember(),
    PredicateDef(),
    PredicateCall(),
    Equality(),
    Membership(),
    Choices(),
    AllowList(),
    BuiltinsHelp(),
    ServerArgField(),
    ArgparseFlag(),
    Value(),
    CallArg(),
    FlagName(),
    Prose(),
)

__all__ = ["RULES", "Context", "Rule", "Token"]
