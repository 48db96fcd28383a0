"""Discovery: how nodes find each other (naming daemon, UDP beacons, brokered mode)."""
