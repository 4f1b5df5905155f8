"""The permissions and groups of gridcrawl's users (Alchemi's ``prm``, ``grp`` and ``grp_prm``
tables): their names and ids, and which permissions each group has.

One home for these names: the manager's pure core checks them, the dashboard reads them, and
:mod:`gridcrawl.auth` stores them in the manager database (docs/security.md says what each
allows). Plain constants, so that importing them costs nothing.
"""

from __future__ import annotations

#: Register an executor (receive grid threads).
EXECUTE_THREAD = "ExecuteThread"
#: Create applications (crawls) and manage one's own.
MANAGE_OWN_APP = "ManageOwnApp"
#: Reattach to, read, pause, resume or cancel anyone's application.
MANAGE_ALL_APPS = "ManageAllApps"
#: Reserved for administrators.
MANAGE_USERS = "ManageUsers"

#: permission id -> name (Alchemi's prm table).
PERMISSIONS: dict[int, str] = {0: EXECUTE_THREAD, 1: MANAGE_OWN_APP, 2: MANAGE_ALL_APPS, 3: MANAGE_USERS}
#: group id -> name (Alchemi's grp table).
GROUPS: dict[int, str] = {0: "Administrators", 1: "Executors", 2: "Users"}
#: group name -> its permissions (Alchemi's grp_prm table).
GROUP_PERMISSIONS: dict[str, frozenset[str]] = {
    "Administrators": frozenset(PERMISSIONS.values()),
    "Executors": frozenset({EXECUTE_THREAD}),
    "Users": frozenset({MANAGE_OWN_APP}),
}

__all__ = ["EXECUTE_THREAD", "MANAGE_OWN_APP", "MANAGE_ALL_APPS", "MANAGE_USERS", "PERMISSIONS", "GROUPS",
           "GROUP_PERMISSIONS"]
