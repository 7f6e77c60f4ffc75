# imagekit: keep the image's declared environment in login shells (Enroot, Pyxis), whose base
# /etc/profile may reset it (Debian's sets PATH). First in /etc/profile.d: each variable that
# /etc/environment names gets back the value this shell started with, and the image's own
# profile.d scripts and ~/.profile then change it as they would. Why and how: imagekit.util.login_env.
if [ -r /etc/environment ] && [ -r "/proc/$$/environ" ]; then
    _imagekit_names=" "
    while IFS= read -r _imagekit_entry || [ -n "$_imagekit_entry" ]; do
        _imagekit_entry=${_imagekit_entry#"${_imagekit_entry%%[![:space:]]*}"}
        _imagekit_entry=${_imagekit_entry#export }
        _imagekit_name=${_imagekit_entry%%=*}
        case $_imagekit_name in ""|[0-9]*|*[!A-Za-z0-9_]*) continue ;; esac
        # Never given back: what a shell refuses from its environment or reads as its own
        # settings (code to run, how to split words, trace prompts), its read-only names, ours.
        case $_imagekit_name in
            IFS|PS[0-9]|ENV|BASH_*|SHELLOPTS|BASHOPTS|PROMPT_COMMAND|CDPATH|GLOBIGNORE|EXECIGNORE) continue ;;
            UID|EUID|PPID|SHLVL|OPTIND|OPTARG|LINENO|RANDOM|SECONDS|HISTCMD|HISTFILE|POSIXLY_CORRECT) continue ;;
            _|_imagekit_*) continue ;;
        esac
        _imagekit_names="$_imagekit_names$_imagekit_name "
    done < /etc/environment
    _imagekit_soh=$(printf "\001")
    # One variable a line: NUL becomes the line end, a newline inside a value becomes \001.
    while IFS= read -r _imagekit_entry; do
        _imagekit_name=${_imagekit_entry%%=*}
        case $_imagekit_name in ""|[0-9]*|*[!A-Za-z0-9_]*) continue ;; esac
        case $_imagekit_names in *" $_imagekit_name "*) ;; *) continue ;; esac
        case $_imagekit_entry in *"$_imagekit_soh"*) continue ;; esac
        # shellcheck disable=SC2163 # the entry is NAME=VALUE: export assigns it
        export "$_imagekit_entry"
    done <<_IMAGEKIT_EOF
$(tr "\n\000" "\001\n" < "/proc/$$/environ")
_IMAGEKIT_EOF
    unset _imagekit_names _imagekit_soh _imagekit_entry _imagekit_name
fi
