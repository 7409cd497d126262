from aihpc.cli import main

raise SystemExit(main())
